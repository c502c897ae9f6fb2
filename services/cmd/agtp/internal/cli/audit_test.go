package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

var chainAgent = strings.Repeat("7f", 32)

// chain is an agent's records, oldest first, as auditsvc would store them.
type chain struct {
	jws []string
	ids []string
}

// buildChain signs n linked records; signers[i] signs record i (nil: the
// first signer).
func buildChain(t *testing.T, n int, signer *attribution.Signer, override map[int]*attribution.Signer) chain {
	t.Helper()
	var c chain
	prev := attribution.ZeroAuditID
	for i := range n {
		s := signer
		if o := override[i]; o != nil {
			s = o
		}
		jws, id, err := s.SignPayload(&attribution.Payload{ServerID: "s1", Timestamp: "2026-01-01T00:00:0" + strconv.Itoa(i) + "Z",
			Status: 200, Method: "QUERY", AgentID: chainAgent, PreviousAuditID: prev, AuditRecordVersion: "1"})
		if err != nil {
			t.Fatal(err)
		}
		c.jws, c.ids = append(c.jws, jws), append(c.ids, id)
		prev = id
	}
	return c
}

// inspectHandler serves INSPECT target=chain_head and target=audit from c,
// with length as the stored count and swap replacing what one Audit-ID
// returns.
func inspectHandler(c chain, length int, swap map[string]string) transport.HandlerFunc {
	return func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		var p map[string]string
		if req.Method != agtp.MethodInspect || json.Unmarshal(req.Body, &p) != nil {
			return agtp.NewErrorResponse(400, "bad", "want INSPECT with a JSON body")
		}
		var out any
		switch p["target"] {
		case "chain_head":
			if p["agent_id"] != chainAgent {
				return agtp.NewErrorResponse(404, "not-found", "no such agent")
			}
			head := ""
			if len(c.ids) > 0 {
				head = c.ids[len(c.ids)-1]
			}
			out = map[string]any{"agent_id": chainAgent, "audit_id": head, "length": length}
		case "audit":
			for i, id := range c.ids {
				if id == p["audit_id"] {
					jws := c.jws[i]
					if s, ok := swap[id]; ok {
						jws = s
					}
					out = map[string]any{"audit_id": id, "jws": jws, "chain_agent_id": chainAgent, "sequence": i + 1}
				}
			}
			if out == nil {
				return agtp.NewErrorResponse(404, "not-found", "no such record")
			}
		default:
			return agtp.NewErrorResponse(400, "target-required", "target")
		}
		b, _ := json.Marshal(out)
		return agtp.NewResponse(200, agtp.MediaTypeJSON, b)
	}
}

func TestAuditVerifyWalksTheChainOnline(t *testing.T) {
	sg := newSigning(t)
	_, intruder, _ := ed25519.GenerateKey(nil)
	good := buildChain(t, 3, sg.signer, nil)
	forged := buildChain(t, 3, sg.signer, map[int]*attribution.Signer{1: attribution.NewSigner(intruder)})
	other := buildChain(t, 2, sg.signer, nil) // other.jws[1] is a valid record, but not good.ids[0]

	for _, tc := range []struct {
		name      string
		h         transport.HandlerFunc
		code      int
		say       []string
		extraArgs []string
	}{
		{"intact chain", inspectHandler(good, 3, nil), ExitOK, []string{"chain " + chainAgent + ": 3 records verified, head " + good.ids[2]}, nil},
		{"record signed by an unknown key", inspectHandler(forged, 3, nil), ExitVerify,
			[]string{"BROKEN at record 1 from the head: unknown-key", "record:   " + forged.ids[1], "1 records verified before the break"}, nil},
		{"store substitutes a record", inspectHandler(good, 3, map[string]string{good.ids[0]: other.jws[1]}), ExitVerify,
			[]string{"BROKEN at record 2 from the head: audit-id-mismatch", "expected: " + good.ids[0]}, nil},
		{"store counts more records than link", inspectHandler(good, 5, nil), ExitVerify, []string{"sequence-gap", "the server counts 5"}, nil},
		{"empty chain", inspectHandler(chain{}, 0, nil), ExitOK, []string{"empty"}, nil},
		{"walk bounded by --max", inspectHandler(good, 3, nil), ExitVerify, []string{"chain-too-long"}, []string{"--max", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, tc.h)
			args := append([]string{"verify", "--cacert", srv.ca, "--jwks", sg.jwksFile}, tc.extraArgs...)
			args = append(args, "agtp://"+chainAgent+"@"+srv.TCPAddr().String())
			r := run(t, "", false, append([]string{"audit"}, args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, s := range tc.say {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
		})
	}
}

func TestAuditVerifyAgentFlagAndErrors(t *testing.T) {
	sg := newSigning(t)
	srv := startServer(t, inspectHandler(buildChain(t, 2, sg.signer, nil), 2, nil))
	r := run(t, "", false, "audit", "verify", "--cacert", srv.ca, "--jwks", sg.jwksFile, "--agent", chainAgent, srv.uri(""))
	if r.code != ExitOK || !strings.Contains(r.stdout, "2 records verified") {
		t.Fatalf("--agent: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, "", false, "audit", "verify", "--cacert", srv.ca, "--jwks", sg.jwksFile, "agtp://"+strings.Repeat("00", 32)+"@"+srv.TCPAddr().String())
	if r.code != ExitError || !strings.Contains(r.stderr, "404 not-found") {
		t.Fatalf("unknown agent: exit %d\n%s", r.code, r.stderr)
	}
	r = run(t, "", false, "audit", "verify", srv.uri(""))
	if r.code != ExitError || !strings.Contains(r.stderr, "name the agent and the server") {
		t.Fatalf("no agent: exit %d\n%s", r.code, r.stderr)
	}
	r = run(t, "", false, "audit", "frob")
	if r.code != ExitError || !strings.Contains(r.stderr, `unknown command "frob"`) {
		t.Fatalf("audit frob: exit %d\n%s", r.code, r.stderr)
	}
}

func writeExport(t *testing.T, c chain, seq func(i int) uint64) string {
	t.Helper()
	var b strings.Builder
	for i := range c.jws {
		line, _ := json.Marshal(attribution.Entry{Format: "jws", Stream: attribution.StreamAttribution, Chain: chainAgent,
			Sequence: seq(i), AuditID: c.ids[i], JWS: c.jws[i]})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "export.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAuditVerifyExportFile(t *testing.T) {
	sg := newSigning(t)
	c := buildChain(t, 4, sg.signer, nil)
	inOrder := func(i int) uint64 { return uint64(i + 1) }
	for _, tc := range []struct {
		name string
		file string
		code int
		say  string
	}{
		{"intact", writeExport(t, c, inOrder), ExitOK, "attribution chain " + chainAgent + ": 4 records verified"},
		{"record deleted", writeExport(t, chain{jws: append(c.jws[:1:1], c.jws[2:]...), ids: append(c.ids[:1:1], c.ids[2:]...)}, inOrder),
			ExitVerify, "previous-audit-id-mismatch"},
		{"sequence gap", writeExport(t, c, func(i int) uint64 { return uint64(i + 1 + i/2) }), ExitVerify, "sequence-gap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, "audit", "verify", "--jwks", sg.jwksFile, "--export", tc.file)
			if r.code != tc.code || !strings.Contains(r.stdout, tc.say) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
		})
	}
	r := run(t, "", false, "audit", "verify", "--export", writeExport(t, c, inOrder))
	if r.code != ExitError || !strings.Contains(r.stderr, "--jwks") {
		t.Fatalf("export without keys: %d %s", r.code, r.stderr)
	}
}
