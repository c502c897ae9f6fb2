package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/agtpsuite/agtp/policysvc"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
)

// policyStack is a real policysvc (gRPC and REST gateway, mTLS) on a real
// redis-server.
type policyStack struct {
	grpcAddr, httpAddr string
	pki                devpki.Layout
	client             policyv1.PolicyServiceClient
}

func (s *policyStack) tlsArgs() []string {
	return []string{"--cacert", s.pki.CA(), "--cert", s.pki.Cert(devpki.Admin), "--key-tls", s.pki.Key(devpki.Admin)}
}

func startPolicy(t *testing.T) *policyStack {
	t.Helper()
	pki := testkit.PKI(t)
	rds := testkit.StartRedis(t)
	cfg := policysvc.DefaultConfig()
	testCommon(&cfg.Common, pki, rds)
	// policysvc signs escalation resolutions and key revocations through
	// auditsvc.
	cfg.Peers = map[string]string{"auditsvc": startAuditOn(t, pki, rds).grpcAddr}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := policysvc.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	runService(t, "policysvc", svc.Run, ctx, cancel)
	// The stack plays the front door (Authorize, MarkIdempotencyUnknown);
	// the command under test is the operator.
	tlsCfg, err := adminTLS(pki.CA(), pki.Cert("frontdoor"), pki.Key("frontdoor"), "")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.NextProtos = []string{"h2"}
	conn, err := grpc.NewClient(svc.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	waitServing(t, "policysvc", conn)
	return &policyStack{grpcAddr: svc.GRPCAddr(), httpAddr: svc.HTTPAddr(), pki: pki, client: policyv1.NewPolicyServiceClient(conn)}
}

const resolveAgent = "3333333333333333333333333333333333333333333333333333333333333333"

func (s *policyStack) authorize(t *testing.T, key string) *policyv1.AuthorizeResponse {
	t.Helper()
	sum := sha256.Sum256([]byte("CREATE\n/orders\n{}"))
	resp, err := s.client.Authorize(context.Background(), &policyv1.AuthorizeRequest{
		AgentId: resolveAgent, Method: "CREATE", PathTemplate: "/orders",
		IdempotencyKey: key, RequestFingerprint: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// unknown leaves key with an unknown outcome, as the front door does when
// a request ran and its record could not be stored.
func (s *policyStack) unknown(t *testing.T, key string) {
	t.Helper()
	first := s.authorize(t, key)
	if first.GetClaim() == nil {
		t.Fatalf("no claim: %v", first)
	}
	if out, err := s.client.MarkIdempotencyUnknown(context.Background(), &policyv1.MarkIdempotencyUnknownRequest{Claim: first.GetClaim()}); err != nil || !out.GetMarked() {
		t.Fatalf("mark unknown: %v %v", out, err)
	}
	if r := s.authorize(t, key); r.GetDenial().GetReason() != "idempotency-outcome-unknown" {
		t.Fatalf("retry before resolving = %v", r)
	}
}

func TestIdempotencyResolveAgainstPolicysvc(t *testing.T) {
	s := startPolicy(t)
	resolve := func(args ...string) result {
		t.Helper()
		return run(t, "", false, append(append([]string{"idempotency", "resolve", "--agent-id", resolveAgent}, s.tlsArgs()...), args...)...)
	}
	for _, tc := range []struct {
		name      string
		key       string // the key the request carried; "" for none
		args      []string
		code      int
		stdout    []string
		stderr    []string
		retryDeny string // the retry's refusal after; "" when it runs
	}{
		{name: "release over gRPC lets the retry run", key: "order-1",
			args: []string{"--grpc", "GRPC", "--idempotency-key", "order-1", "--release", "--note", "no order in the ledger"},
			code: ExitOK, stdout: []string{"was:  unknown", "now:  free"}},
		{name: "applied over the REST gateway keeps refusing", key: "pay-1",
			args: []string{"--admin", "REST", "--idempotency-key", "pay-1", "--applied"},
			code: ExitOK, stdout: []string{"was:  unknown", "now:  applied"}, retryDeny: "idempotency-outcome-applied"},
		{name: "an AGP client's key", key: "agp:order-2",
			args: []string{"--grpc", "GRPC", "--agp", "--idempotency-key", "order-2", "--release"},
			code: ExitOK, stdout: []string{"Idempotency-Key \"agp:order-2\""}},
		{name: "an unknown key is 404 with what to check",
			args:   []string{"--grpc", "GRPC", "--idempotency-key", "never-used", "--release"},
			code:   ExitClientError,
			stderr: []string{"404 idempotency-key-not-found", "--agp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.key != "" {
				s.unknown(t, tc.key)
			}
			args := strings.NewReplacer("GRPC", s.grpcAddr, "REST", "https://"+s.httpAddr).Replace(strings.Join(tc.args, "\x00"))
			r := resolve(strings.Split(args, "\x00")...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout does not say %q:\n%s", want, r.stdout)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
			if tc.key == "" {
				return
			}
			retry := s.authorize(t, tc.key)
			if got := retry.GetDenial().GetReason(); got != tc.retryDeny {
				t.Fatalf("retry after resolving = %v, want %q", retry, tc.retryDeny)
			}
		})
	}
	t.Run("a running request is left to finish: 409", func(t *testing.T) {
		if r := s.authorize(t, "running-1"); r.GetClaim() == nil {
			t.Fatal("no claim")
		}
		r := resolve("--grpc", s.grpcAddr, "--idempotency-key", "running-1", "--release")
		if r.code != ExitClientError || !strings.Contains(r.stderr, "409 idempotency-in-flight") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	})
}

func TestIdempotencyResolveUsage(t *testing.T) {
	tls := []string{"--cacert", "ca.pem", "--cert", "admin.pem", "--key-tls", "admin-key.pem"}
	free := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	pki := testkit.PKI(t)
	realTLS := []string{"--cacert", pki.CA(), "--cert", pki.Cert(devpki.Admin), "--key-tls", pki.Key(devpki.Admin)}
	for _, tc := range []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"help", []string{"--help"}, ExitOK, "idempotency-outcome-unknown"},
		{"neither resolution", append([]string{"--agent-id", "a", "--idempotency-key", "k"}, tls...), ExitError, "--release (no effect) or --applied"},
		{"both resolutions", append([]string{"--agent-id", "a", "--idempotency-key", "k", "--release", "--applied"}, tls...), ExitError, "--release (no effect) or --applied"},
		{"no agent", append([]string{"--idempotency-key", "k", "--release"}, tls...), ExitError, "--agent-id is required"},
		{"no key", append([]string{"--agent-id", "a", "--release"}, tls...), ExitError, "--idempotency-key is required"},
		{"a key with a control character", append([]string{"--agent-id", "a", "--idempotency-key", "a\tb", "--release"}, tls...), ExitError, "printable ASCII"},
		{"no TLS", []string{"--agent-id", "a", "--idempotency-key", "k", "--release"}, ExitError, "mutual TLS only"},
		{"two ways", append([]string{"--agent-id", "a", "--idempotency-key", "k", "--release", "--grpc", "x:1", "--admin", "https://x"}, tls...), ExitError, "give one"},
		{"a plain http gateway", append([]string{"--agent-id", "a", "--idempotency-key", "k", "--release", "--admin", "http://127.0.0.1:8102"}, realTLS...), ExitError, "https://127.0.0.1:8102"},
		{"nothing listening", append([]string{"--agent-id", "a", "--idempotency-key", "k", "--release", "--grpc", free, "--timeout", "3s"}, realTLS...), ExitError, "nothing is listening"},
		{"an unknown subcommand", nil, ExitError, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"idempotency", "resolve"}, tc.args...)
			if tc.args == nil {
				args = []string{"idempotency", "forget"}
			}
			r := run(t, "", false, args...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.say) {
				t.Fatalf("exit %d, want %d saying %q\n%s%s", r.code, tc.code, tc.say, r.stdout, r.stderr)
			}
		})
	}
}
