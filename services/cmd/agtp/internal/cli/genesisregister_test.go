package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/identitysvc"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// identityStack is a real identitysvc (gRPC and REST gateway, mTLS) with
// a real auditsvc as its peer and a real redis-server.
type identityStack struct {
	grpcAddr, httpAddr string
	pki                devpki.Layout
	client             identityv1.IdentityServiceClient
}

// tlsArgs are the operator's mTLS flags.
func (s *identityStack) tlsArgs() []string {
	return []string{"--cacert", s.pki.CA(), "--cert", s.pki.Cert(devpki.Admin), "--key-tls", s.pki.Key(devpki.Admin)}
}

func startIdentity(t *testing.T) *identityStack {
	t.Helper()
	pki := testkit.PKI(t)
	rds := testkit.StartRedis(t)
	common := func(c *kit.Common) {
		c.CAFile, c.CertFile, c.KeyFile = pki.CA(), pki.Cert(c.Name), pki.Key(c.Name)
		c.SigningKeyFile = pki.SigningKey()
		c.RedisURL = rds.URL()
		c.LogLevel = "error"
		c.GRPCAddr = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan error
	t.Cleanup(func() {
		cancel()
		for _, d := range done {
			if err := <-d; err != nil {
				t.Errorf("service: %v", err)
			}
		}
	})
	runService := func(run func(context.Context) error) {
		d := make(chan error, 1)
		done = append(done, d)
		go func() { d <- run(ctx) }()
	}

	acfg := auditsvc.DefaultConfig()
	common(&acfg.Common)
	acfg.HTTPAddr = ""
	audit, err := auditsvc.New(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(audit.Run)

	icfg := identitysvc.DefaultConfig()
	common(&icfg.Common)
	icfg.HTTPAddr = "127.0.0.1:0"
	icfg.Peers = map[string]string{"auditsvc": audit.GRPCAddr()}
	icfg.AgentCACertFile, icfg.AgentCAKeyFile = pki.AgentCA(), pki.AgentCAKey()
	// The tests run lifecycle calls as the operator, without the Genesis
	// issuer's certificate; identitysvc listens on loopback only.
	icfg.Options.LifecycleAuth = "open"
	ident, err := identitysvc.New(ctx, icfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(ident.Run)

	s := &identityStack{grpcAddr: ident.GRPCAddr(), httpAddr: ident.HTTPAddr(), pki: pki}
	cfg, err := adminTLS(pki.CA(), pki.Cert(devpki.Admin), pki.Key(devpki.Admin), "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := newGRPCAdmin(s.grpcAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.close)
	s.client = admin.c
	health := grpc_health_v1.NewHealthClient(admin.conn)
	testkit.WaitFor(t, 20*time.Second, "identitysvc SERVING", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := health.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING
	})
	return s
}

func TestGenesisRegisterAgainstIdentitysvc(t *testing.T) {
	s := startIdentity(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	register := func(args ...string) result {
		t.Helper()
		return run(t, "", false, append(append([]string{"genesis", "register", "--grpc", s.grpcAddr}, s.tlsArgs()...), args...)...)
	}
	resolve := func(id string) (*identityv1.AgentRecord, error) {
		resp, err := s.client.ResolveAgent(context.Background(), &identityv1.ResolveAgentRequest{AgentId: id})
		return resp.GetAgent(), err
	}

	helper, helperID := makeGenesis(t, dir, key)
	r := register("--activate", helper)
	if r.code != ExitOK || !strings.Contains(r.stdout, "registered "+helperID) ||
		!strings.Contains(r.stdout, "name:      helper") || !strings.Contains(r.stdout, "status:    active") {
		t.Fatalf("register: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if rec, err := resolve(helperID); err != nil || rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE {
		t.Fatalf("the registry does not hold the agent active: %v %v", rec, err)
	}

	// A second owner's Genesis, registered without --activate, is pending.
	pending, pendingID := makeGenesis(t, dir, key, "--owner", "Pending Corp", "--label", "waiting")
	r = register(pending)
	if r.code != ExitOK || !strings.Contains(r.stdout, "status:    pending") || !strings.Contains(r.stderr, "ACTIVATE it") {
		t.Fatalf("register without --activate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Retire it, then try again.
	if _, err := s.client.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{
		AgentId: pendingID, Transition: identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE, Reason: "test",
	}); err != nil {
		t.Fatal(err)
	}

	// A document with the helper's Agent-ID but other bytes: the same
	// signature, base64url with padding, which decodes to the same bytes.
	collide := filepath.Join(dir, "collide.json")
	data, _ := os.ReadFile(helper)
	if err := os.WriteFile(collide, data, 0o644); err != nil {
		t.Fatal(err)
	}
	editFile(t, collide, func(o map[string]any) { o["signature"] = o["signature"].(string) + "==" })

	tampered := filepath.Join(dir, "tampered.json")
	if err := os.WriteFile(tampered, data, 0o644); err != nil {
		t.Fatal(err)
	}
	editFile(t, tampered, func(o map[string]any) { o["owner"] = "Mallory" })

	experimental, experimentalID := makeGenesis(t, dir, key, "--tier", "3", "--label", "lab")
	taken, takenID := makeGenesis(t, dir, key, "--owner", "Another Corp")

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		say    []string
		notReg string // an Agent-ID that must still be unknown
	}{
		{"the same Genesis again is already registered", []string{helper}, ExitClientError,
			[]string{"409 agent-id-collision", "already registered, from this same Genesis: name helper, status active"}, ""},
		{"another document under the same ID is a collision", []string{collide}, ExitClientError,
			[]string{"409 agent-id-collision", "collision: the registry holds a different document under Agent-ID " + helperID}, ""},
		{"a retired ID is never reused", []string{pending}, ExitClientError,
			[]string{"409 agent-id-retired", "was retired", "agtp genesis new"}, ""},
		{"a taken name is refused", []string{taken}, ExitClientError,
			[]string{"409 agent-name-taken", `agent name "helper"`, "--name LABEL"}, takenID},
		{"a tier 3 agent's name starts with X-", []string{experimental}, ExitClientError,
			[]string{"400 experimental-label-required", "--name X-lab"}, experimentalID},
		{"a tampered Genesis is never sent", []string{tampered}, ExitVerify,
			[]string{"genesis-hash-mismatch", "nothing was sent"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := register(tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, say := range tc.say {
				if !strings.Contains(r.stderr, say) {
					t.Errorf("stderr does not say %q:\n%s", say, r.stderr)
				}
			}
			if tc.notReg != "" {
				if _, err := resolve(tc.notReg); err == nil {
					t.Errorf("a refused registration stored %s", tc.notReg)
				}
			}
		})
	}

	// The fixes the hints name work.
	if r := register("--name", "helper-2", "--activate", taken); r.code != ExitOK || !strings.Contains(r.stdout, "name:      helper-2") {
		t.Fatalf("--name: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := register("--name", "X-lab", experimental); r.code != ExitOK || !strings.Contains(r.stdout, "trust:     tier 3") {
		t.Fatalf("X- name: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// The delegation consent `genesis new` states reaches the identity
	// document; without it the document says delegation_permitted false.
	consenting, consentingID := makeGenesis(t, dir, key, "--owner", "Delegate Corp", "--label", "reviewer",
		"--delegation-permitted", "--max-delegation-depth", "1")
	if r := register("--activate", consenting); r.code != ExitOK {
		t.Fatalf("register a consenting Genesis: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		id        string
		permitted bool
		depth     any
	}{{consentingID, true, 1.0}, {helperID, false, nil}} {
		resp, err := s.client.GetIdentityDocument(context.Background(), &identityv1.GetIdentityDocumentRequest{AgentId: tc.id, Format: "json"})
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(resp.GetDocument()), &doc); err != nil {
			t.Fatalf("identity document: %v\n%s", err, resp.GetDocument())
		}
		if doc["delegation_permitted"] != tc.permitted || doc["max_delegation_depth"] != tc.depth {
			t.Fatalf("identity document of %s: delegation_permitted %v, max_delegation_depth %v; want %v, %v",
				tc.id, doc["delegation_permitted"], doc["max_delegation_depth"], tc.permitted, tc.depth)
		}
	}
}

func TestGenesisRegisterThroughTheRESTGateway(t *testing.T) {
	s := startIdentity(t)
	dir := t.TempDir()
	path, id := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))
	args := append([]string{"genesis", "register", "--admin", "https://" + s.httpAddr + "/", "--activate"}, s.tlsArgs()...)

	r := run(t, "", false, append(args, path)...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "registered "+id) || !strings.Contains(r.stdout, "status:    active") {
		t.Fatalf("register over REST: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The gateway's error body carries the same reason as gRPC.
	r = run(t, "", false, append(args, path)...)
	if r.code != ExitClientError || !strings.Contains(r.stderr, "409 agent-id-collision") || !strings.Contains(r.stderr, "from this same Genesis") {
		t.Fatalf("second register over REST: exit %d\n%s", r.code, r.stderr)
	}
}

func TestGenesisRegisterConnectionErrorsSayWhatToDo(t *testing.T) {
	s := startIdentity(t)
	dir := t.TempDir()
	path, _ := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))
	foreign, err := devpki.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	free := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	for _, tc := range []struct {
		name string
		args []string
		say  string
	}{
		{"nothing listening", append([]string{"--grpc", free}, s.tlsArgs()...), "Is the suite running"},
		{"nothing listening over REST", append([]string{"--admin", "https://" + free}, s.tlsArgs()...), "Is the suite running"},
		{"another CA", []string{"--grpc", s.grpcAddr, "--cacert", foreign.CA(), "--cert", s.pki.Cert(devpki.Admin), "--key-tls", s.pki.Key(devpki.Admin)}, "not signed by --cacert"},
		{"a name the certificate lacks", append([]string{"--grpc", s.grpcAddr, "--server-name", "auditsvc.invalid"}, s.tlsArgs()...), "--server-name"},
		{"a client certificate of another CA", []string{"--grpc", s.grpcAddr, "--cacert", s.pki.CA(), "--cert", foreign.Cert(devpki.Admin), "--key-tls", foreign.Key(devpki.Admin)}, "client certificates issued by the suite CA"},
		{"an http URL", append([]string{"--admin", "http://" + s.httpAddr}, s.tlsArgs()...), "want the gateway's https:// URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, append(append([]string{"genesis", "register", "--timeout", "5s"}, tc.args...), path)...)
			if r.code != ExitError || !strings.Contains(r.stderr, tc.say) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", r.code, tc.say, r.stderr)
			}
		})
	}
}
