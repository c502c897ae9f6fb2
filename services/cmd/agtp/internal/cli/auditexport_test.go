package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/auditsvc/attribution"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

var auditRecords = flag.Int("audit-records", 100_000, "records in the chain TestAuditVerifyStreamsALongChain verifies")

// auditStack is a running auditsvc on a real redis-server.
type auditStack struct {
	grpcAddr string
	httpAddr string
	pki      devpki.Layout
	rdb      *redis.Client
	signer   *attribution.Signer
}

func startAudit(t *testing.T) *auditStack {
	t.Helper()
	return startAuditOn(t, testkit.PKI(t), testkit.StartRedis(t))
}

// startAuditOn runs auditsvc with pki's certificates on rds.
func startAuditOn(t *testing.T, pki devpki.Layout, rds *testkit.Redis) *auditStack {
	t.Helper()
	cfg := auditsvc.DefaultConfig()
	testCommon(&cfg.Common, pki, rds)
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := auditsvc.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	runService(t, "auditsvc", svc.Run, ctx, cancel)
	ks, err := attribution.LoadKeySet(pki.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	s := &auditStack{grpcAddr: svc.GRPCAddr(), httpAddr: svc.HTTPAddr(), pki: pki, rdb: rds.Client(t), signer: ks.Signer()}
	tlsCfg, err := adminTLS(pki.CA(), pki.Cert(devpki.Admin), pki.Key(devpki.Admin), "")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.NextProtos = []string{"h2"}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitServing(t, "auditsvc", conn)
	return s
}

// seedChain signs n linked records for agent and writes them in the audit
// store's layout (the records stream, entry IDs "<sequence>-0", and the
// head hash), a thousand per pipeline: appending one at a time through the
// service would cost a round trip per record. tamper, when set, rewrites
// the JWS of the record at a sequence after it was signed and linked.
func (s *auditStack) seedChain(t *testing.T, agent string, n int, tamper map[int]func(string) string) {
	t.Helper()
	ctx := context.Background()
	prev := attribution.ZeroAuditID
	stored := time.Now().UnixMilli()
	for from := 1; from <= n; from += 1000 {
		pl := s.rdb.Pipeline()
		for seq := from; seq < from+1000 && seq <= n; seq++ {
			jws, id, err := s.signer.SignPayload(&attribution.Payload{ServerID: "audit.test", Status: 200, Method: "QUERY",
				AgentID: agent, RequestID: "req-" + strconv.Itoa(seq), PreviousAuditID: prev, AuditRecordVersion: attribution.RecordVersion})
			if err != nil {
				t.Fatal(err)
			}
			prev = id
			if f := tamper[seq]; f != nil {
				jws = f(jws)
				id = attribution.AuditID(jws)
			}
			pl.XAdd(ctx, &redis.XAddArgs{Stream: rediskeys.ChainStream(agent), ID: strconv.Itoa(seq) + "-0",
				Values: []any{"audit_id", id, "jws", jws, "stored_at", stored}})
			pl.HSet(ctx, rediskeys.ChainHead(agent), rediskeys.HeadAuditID, id, rediskeys.HeadLength, seq)
		}
		if _, err := pl.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// verifyArgs are the flags of a streamed verification as the operator.
func (s *auditStack) verifyArgs(addr, agent string, more ...string) []string {
	return append([]string{"audit", "verify", "--grpc", addr, "--cacert", s.pki.CA(), "--cert", s.pki.Cert(devpki.Admin),
		"--key", s.pki.Key(devpki.Admin), "--agent", agent}, more...)
}

// runLong runs the command with a deadline fit for a long chain on a
// shared machine.
func runLong(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	code := Run(ctx, args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
	return result{code, out.String(), errOut.String()}
}

func TestAuditVerifyStreamsALongChain(t *testing.T) {
	s := startAudit(t)
	agent := strings.Repeat("a1", 32)
	n := *auditRecords
	began := time.Now()
	s.seedChain(t, agent, n, nil)
	t.Logf("seeded %d records in %v", n, time.Since(began))

	r := runLong(t, s.verifyArgs(s.grpcAddr, agent, "-v")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, fmt.Sprintf("chain %s: %d records verified", agent, n)) {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// -v shows progress although stderr is no terminal; the last line
	// is the total and the rate.
	if !strings.Contains(r.stderr, fmt.Sprintf("verified %d records in ", n)) || !strings.Contains(r.stderr, "records/s") {
		t.Fatalf("no progress on stderr: %q", r.stderr)
	}
	t.Logf("verification: %s", r.stderr[strings.LastIndex(strings.TrimSuffix(r.stderr, "\n"), "\n")+1:])
}

// tamperStatus changes the payload of a record and keeps its signature.
func tamperStatus(t *testing.T) func(string) string {
	return func(jws string) string {
		parts := strings.Split(jws, ".")
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		changed := bytes.Replace(payload, []byte(`"status":200`), []byte(`"status":201`), 1)
		if bytes.Equal(changed, payload) {
			t.Fatalf("payload %s has no status 200", payload)
		}
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString(changed) + "." + parts[2]
	}
}

func TestAuditVerifyStreamReportsTheTamperedRecord(t *testing.T) {
	s := startAudit(t)
	agent := strings.Repeat("a2", 32)
	s.seedChain(t, agent, 1000, map[int]func(string) string{500: tamperStatus(t)})

	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"whole chain", nil, ExitVerify, []string{"BROKEN at record 500 (sequence number): signature-invalid", "499 records verified before the break"}},
		{"from before the record", []string{"--from", "100"}, ExitVerify,
			[]string{"BROKEN at record 500 (sequence number): signature-invalid", "400 records verified before the break", "anchored at record 99"}},
		{"from after the record", []string{"--from", "600"}, ExitOK, []string{"401 records verified", "anchored at record 599"}},
		{"from 1 is the whole chain", []string{"--from", "1"}, ExitVerify, []string{"BROKEN at record 500"}},
		{"anchored on the record", []string{"--from", "501"}, ExitVerify, []string{"BROKEN at record 500", "does not verify"}},
		{"from the record after the head", []string{"--from", "1001"}, ExitOK, []string{"0 records verified", "anchored at record 1000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runLong(t, s.verifyArgs(s.grpcAddr, agent, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			if r.stderr != "" {
				t.Errorf("without -v and a terminal, stderr should stay quiet: %q", r.stderr)
			}
			for _, want := range tc.contains {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
		})
	}
	if r := runLong(t, s.verifyArgs(s.grpcAddr, agent, "--from", "1002")...); r.code != ExitError || !strings.Contains(r.stderr, "the chain has 1000 records") {
		t.Fatalf("--from past the head: exit %d, stderr %q", r.code, r.stderr)
	}
}

// cuttingProxy forwards TCP to target and cuts its first connection once
// limit bytes came back from the target, as a network failure would.
func cuttingProxy(t *testing.T, target string, limit int64) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	first := true
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			cut := first
			first = false
			wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			wg.Go(func() {
				if cut {
					_, _ = io.CopyN(c, up, limit)
				} else {
					_, _ = io.Copy(c, up)
				}
				c.Close()
				up.Close()
			})
		}
	})
	return lis.Addr().String()
}

func TestAuditVerifyStreamResumesAfterABrokenConnection(t *testing.T) {
	s := startAudit(t)
	agent := strings.Repeat("a3", 32)
	const n = 5000
	s.seedChain(t, agent, n, nil)
	addr := cuttingProxy(t, s.grpcAddr, 1<<20)

	r := runLong(t, s.verifyArgs(addr, agent, "--server-name", "auditsvc")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, fmt.Sprintf("%d records verified", n)) {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "resuming (attempt 1 of 5)") {
		t.Fatalf("stderr does not say the stream resumed: %q", r.stderr)
	}
}

func TestAuditVerifyStreamRefusesBadUse(t *testing.T) {
	pki := testkit.PKI(t)
	agent := strings.Repeat("a4", 32)
	tls := []string{"--cacert", pki.CA(), "--cert", pki.Cert(devpki.Admin), "--key", pki.Key(devpki.Admin)}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no agent", append([]string{"--grpc", "127.0.0.1:1"}, tls...), "--grpc needs --agent"},
		{"a URI too", append([]string{"--grpc", "127.0.0.1:1", "--agent", agent, "agtp://h"}, tls...), "not a URI"},
		{"no certificate", []string{"--grpc", "127.0.0.1:1", "--agent", agent}, "operator certificate"},
		{"from without grpc", []string{"--from", "5", "--agent", agent, "agtp://127.0.0.1:1"}, "--from needs --grpc"},
		{"reconnects out of range", append([]string{"--grpc", "127.0.0.1:1", "--agent", agent, "--reconnects", "1000"}, tls...), "--reconnects"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, append([]string{"audit", "verify"}, tc.args...)...)
			if r.code != ExitError || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

// TestExportChainOverTheRESTGateway: the gateway route streams the export
// as newline-delimited JSON, one {"result": ...} per message.
func TestExportChainOverTheRESTGateway(t *testing.T) {
	s := startAudit(t)
	agent := strings.Repeat("a5", 32)
	s.seedChain(t, agent, 600, nil)
	cfg, err := adminTLS(s.pki.CA(), s.pki.Cert(devpki.Admin), s.pki.Key(devpki.Admin), "")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}, Timeout: time.Minute}
	resp, err := hc.Get("https://" + s.httpAddr + "/v1/audit/chains/" + agent + ":export?from_sequence=2&batch_size=100")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var start *auditv1.ExportChainStart
	next := uint64(2)
	for sc.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Result == nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		var m auditv1.ExportChainResponse
		if err := protojson.Unmarshal(line.Result, &m); err != nil {
			t.Fatal(err)
		}
		if start == nil {
			start = m.GetStart()
			continue
		}
		for _, r := range m.GetRecords() {
			if r.GetSequence() != next || attribution.AuditID(r.GetJws()) != r.GetAuditId() {
				t.Fatalf("record %d: %v", next, r)
			}
			next++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if start.GetLength() != 600 || next != 601 {
		t.Fatalf("start %v, records up to %d", start, next-1)
	}
}
