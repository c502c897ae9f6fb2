package cli

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/identitysvc"
	"github.com/agtpsuite/agtp/identitysvc/demo"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// newArgs are the flags of a valid Tier 2 Genesis; issued-at is fixed so
// that the same key gives the same Agent-ID.
func newArgs(key string, extra ...string) []string {
	return append([]string{"genesis", "new", "--owner", "Acme Corp", "--archetype", "assistant", "--zone", "development",
		"--scope", "documents:read, orders:read", "--scope", "reports:run", "--label", "helper",
		"--issued-at", "2026-01-15T09:00:00Z", "--key", key}, extra...)
}

// makeGenesis runs `genesis new` into a file and returns its path and
// Agent-ID.
func makeGenesis(t *testing.T, dir, key string, extra ...string) (string, string) {
	t.Helper()
	out := filepath.Join(dir, "g-"+strconv.Itoa(len(extra))+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".json")
	r := run(t, "", false, newArgs(key, append(extra, "--out", out)...)...)
	if r.code != ExitOK {
		t.Fatalf("genesis new: exit %d\n%s", r.code, r.stderr)
	}
	return out, strings.TrimSpace(r.stdout)
}

func loadFile(t *testing.T, path string) *genesis.Genesis {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := genesis.Load([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatalf("%s does not load: %v", path, err)
	}
	return g
}

// editFile changes members of a Genesis file without signing it again.
func editFile(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := jcs.ParseObject([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatal(err)
	}
	edit(obj)
	out, err := jcs.Append(nil, obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGenesisNewCreatesTheKeyOnceAndASignedGenesis(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	path, id := makeGenesis(t, dir, key)

	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("issuer key: %v, mode %v; want a 0600 file", err, st.Mode())
	}
	priv, err := keyfile.ReadEd25519(key)
	if err != nil {
		t.Fatal(err)
	}
	g := loadFile(t, path)
	if !agtp.IsCanonicalID(id) || id != g.AgentID || id != g.ComputeAgentID() {
		t.Fatalf("stdout Agent-ID %q, Genesis agent_id %s", id, g.AgentID)
	}
	if !g.IssuerPublicKey.Equal(priv.Public()) {
		t.Fatal("the Genesis is not issued by the key file")
	}
	if g.Owner != "Acme Corp" || g.Archetype != genesis.ArchetypeAssistant || g.GovernanceZone != "development" ||
		!slices.Equal(g.Scope, []string{"documents:read", "orders:read", "reports:run"}) ||
		g.TrustTier != genesis.TierOrgAsserted || g.VerificationPath != genesis.PathOrgAsserted || g.OrgLabel != "helper" {
		t.Fatalf("members: %s", g.Bytes())
	}

	// The same key and content give the same Agent-ID: the key was
	// reused, not replaced.
	r := run(t, "", false, newArgs(key)...)
	if r.code != ExitOK || strings.Contains(r.stderr, "created issuer key") {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	g2, err := genesis.Load([]byte(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatalf("stdout is not a verified Genesis: %v\n%s", err, r.stdout)
	}
	if g2.AgentID != id || !strings.Contains(r.stderr, "Agent-ID: "+id) {
		t.Fatalf("without --out: Agent-ID %s, stderr %q; want %s on stderr", g2.AgentID, r.stderr, id)
	}
}

func TestGenesisNewNamesTheFlagOfARefusedValue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		drop  string // a flag of newArgs to leave out
		say   string
	}{
		{"owner is required", nil, "--owner", "missing --owner"},
		{"archetype must be one of five", []string{"--archetype", "wizard"}, "", "--archetype: \"wizard\" is not one of"},
		{"scope tokens are resource:action", []string{"--scope", "nocolon"}, "", "--scope:"},
		{"tier 1 names its path", []string{"--tier", "1"}, "", "--path:"},
		{"tier is 1, 2 or 3", []string{"--tier", "7"}, "", "--tier: must be the number 1, 2 or 3"},
		{"dns-anchored needs the domain", []string{"--tier", "1", "--path", "dns-anchored"}, "", "--org-domain:"},
		{"log-anchored needs a proof", []string{"--tier", "1", "--path", "log-anchored"}, "", "--log-proof:"},
		{"issued-at is RFC 3339", []string{"--issued-at", "yesterday"}, "", "--issued-at \"yesterday\" is not an RFC 3339 time"},
		{"log proof is JSON", []string{"--log-proof", "{nope"}, "", "--log-proof is not JSON"},
		{"no positional arguments", []string{"extra"}, "", "unexpected argument \"extra\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := filepath.Join(t.TempDir(), "issuer.key")
			args := newArgs(key)
			if tc.drop != "" {
				i := slices.Index(args, tc.drop)
				args = slices.Delete(args, i, i+2)
			}
			// Later flags win, so extra values replace newArgs' ones.
			args = append(args, tc.extra...)
			r := run(t, "", false, args...)
			if r.code != ExitError || !strings.Contains(r.stderr, tc.say) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", r.code, tc.say, r.stderr)
			}
			if r.stdout != "" {
				t.Fatalf("a refused Genesis printed %q", r.stdout)
			}
			if _, err := os.Stat(key); err == nil {
				t.Fatal("a key was left behind for a refused Genesis")
			}
		})
	}
}

func TestGenesisNewTier1WithItsAnchors(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	proof := filepath.Join(dir, "proof.json")
	if err := os.WriteFile(proof, []byte(`{"log":"rekor","index":7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	path, _ := makeGenesis(t, dir, key, "--tier", "1", "--path", "log-anchored", "--log-proof", "@"+proof, "--package-ref", "helper.agent")
	g := loadFile(t, path)
	if g.TrustTier != 1 || g.EffectivePath() != genesis.PathLogAnchored || string(g.LogInclusionProof) != `{"index":7,"log":"rekor"}` || g.PackageRef != "helper.agent" {
		t.Fatalf("tier 1 Genesis: %s", g.Bytes())
	}
	path, _ = makeGenesis(t, dir, key, "--tier", "1", "--path", "dns-anchored", "--org-domain", "acme.example")
	if g := loadFile(t, path); g.OrgDomain != "acme.example" || g.TrustWarning() != "" {
		t.Fatalf("dns-anchored Genesis: %s", g.Bytes())
	}
}

func TestGenesisSignMakesAnEditedGenesisVerifyAgain(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	path, oldID := makeGenesis(t, dir, key)
	editFile(t, path, func(o map[string]any) { o["owner"] = "Other Corp"; o["x_note"] = "kept" })

	r := run(t, "", false, "genesis", "verify", path)
	if r.code != ExitVerify || !strings.Contains(r.stdout, "INVALID: genesis-hash-mismatch: agent_id") || !strings.Contains(r.stdout, "agtp genesis sign") {
		t.Fatalf("edited Genesis: exit %d\n%s", r.code, r.stdout)
	}

	r = run(t, "", false, "genesis", "sign", "--key", key, path)
	if r.code != ExitOK {
		t.Fatalf("sign: exit %d\n%s", r.code, r.stderr)
	}
	newID := strings.TrimSpace(r.stdout)
	g := loadFile(t, path)
	if newID == oldID || newID != g.AgentID || !strings.Contains(r.stderr, "the Agent-ID changed: "+newID+" was "+oldID) {
		t.Fatalf("sign: stdout %q stderr %q, file agent_id %s (was %s)", newID, r.stderr, g.AgentID, oldID)
	}
	if v, _ := g.Member("x_note"); g.Owner != "Other Corp" || v != "kept" {
		t.Fatalf("edits lost: %s", g.Bytes())
	}
	if r := run(t, "", false, "genesis", "verify", path); r.code != ExitOK {
		t.Fatalf("re-signed Genesis: exit %d\n%s", r.code, r.stdout)
	}
}

func TestGenesisSignCompletesAnUnsignedDocument(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "issuer.key")
	priv, err := demo.WriteNewKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// No agent_id, issuer_public_key or signature: written by hand.
	doc := `{"owner":"Acme Corp","archetype":"monitor","governance_zone":"production",
	  "scope":["metrics:read"],"issued_at":"2026-02-01T00:00:00Z","trust_tier":3}`
	r := run(t, doc, false, "genesis", "sign", "--key", key, "-")
	if r.code != ExitOK {
		t.Fatalf("sign -: exit %d\n%s", r.code, r.stderr)
	}
	g, err := genesis.Load([]byte(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatalf("stdout is not a verified Genesis: %v\n%s", err, r.stdout)
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	if !g.IssuerPublicKey.Equal(pub) || !strings.Contains(r.stderr, "Agent-ID: "+g.AgentID) {
		t.Fatalf("issuer %x, stderr %q", g.IssuerPublicKey, r.stderr)
	}
}

func TestGenesisSignRefusesAnotherIssuersKey(t *testing.T) {
	dir := t.TempDir()
	path, _ := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))
	before, _ := os.ReadFile(path)
	other := filepath.Join(dir, "other.key")
	if _, err := demo.WriteNewKey(other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		say  string
	}{
		{"another issuer", []string{"--key", other, path}, "is not the issuer of"},
		{"no key", []string{path}, "--key FILE is required"},
		{"missing key file", []string{"--key", filepath.Join(dir, "nope.key"), path}, "no such file"},
		{"not a key", []string{"--key", path, path}, "not a PEM PRIVATE KEY"},
		{"two files", []string{"--key", other, path, path}, "want one GENESIS file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, append([]string{"genesis", "sign"}, tc.args...)...)
			if r.code != ExitError || !strings.Contains(r.stderr, tc.say) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", r.code, tc.say, r.stderr)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatal("a refused sign changed the file")
			}
		})
	}
}

func TestGenesisVerifyNamesTheReason(t *testing.T) {
	dir := t.TempDir()
	good, id := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))
	goodBytes, _ := os.ReadFile(good)
	variant := func(edit func(map[string]any)) string {
		p := filepath.Join(t.TempDir(), "g.json")
		if err := os.WriteFile(p, goodBytes, 0o644); err != nil {
			t.Fatal(err)
		}
		editFile(t, p, edit)
		return p
	}
	notJSON := filepath.Join(dir, "not.json")
	if err := os.WriteFile(notJSON, []byte("owner: acme\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherSig, _ := makeGenesis(t, dir, filepath.Join(dir, "other.key"))
	sigOf := func(p string) any {
		var v any
		editFile(t, p, func(o map[string]any) { v = o["signature"] })
		return v
	}

	for _, tc := range []struct {
		name string
		file string
		code int
		say  string
	}{
		{"a valid Genesis verifies", good, ExitOK, "verified\n  agent-id:   " + id},
		{"a changed agent_id is a hash mismatch", variant(func(o map[string]any) { o["agent_id"] = strings.Repeat("0", 64) }), ExitVerify, "INVALID: genesis-hash-mismatch: agent_id"},
		{"a changed member is a hash mismatch", variant(func(o map[string]any) { o["governance_zone"] = "production" }), ExitVerify, "INVALID: genesis-hash-mismatch"},
		{"another key's signature does not verify", variant(func(o map[string]any) { o["signature"] = sigOf(otherSig) }), ExitVerify, "INVALID: genesis-signature-invalid: signature"},
		{"an unsigned Genesis is not valid", variant(func(o map[string]any) { delete(o, "signature") }), ExitVerify, "INVALID: genesis-field-missing: signature"},
		{"a missing owner is named", variant(func(o map[string]any) { delete(o, "owner") }), ExitVerify, "INVALID: genesis-field-missing: owner"},
		{"a bad archetype is named", variant(func(o map[string]any) { o["archetype"] = "wizard" }), ExitVerify, "INVALID: genesis-field-invalid: archetype"},
		{"not JSON is malformed", notJSON, ExitVerify, "INVALID: genesis-malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, "genesis", "verify", tc.file)
			if r.code != tc.code || !strings.Contains(r.stdout, tc.say) {
				t.Fatalf("exit %d (want %d), stdout does not say %q:\n%s%s", r.code, tc.code, tc.say, r.stdout, r.stderr)
			}
		})
	}

	r := run(t, "", false, "genesis", "verify", good, notJSON)
	if r.code != ExitVerify || !strings.Contains(r.stdout, good+": verified") {
		t.Fatalf("one bad file of two: exit %d\n%s", r.code, r.stdout)
	}
	r = run(t, "", false, "genesis", "verify", filepath.Join(dir, "nope.json"))
	if r.code != ExitError || !strings.Contains(r.stderr, "no such file") {
		t.Fatalf("missing file: exit %d\n%s", r.code, r.stderr)
	}
	r = run(t, string(goodBytes), false, "genesis", "verify", "-")
	if r.code != ExitOK || !strings.Contains(r.stdout, "stdin: verified") {
		t.Fatalf("stdin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestGenesisIDIsRecomputedNotRead(t *testing.T) {
	dir := t.TempDir()
	path, id := makeGenesis(t, dir, filepath.Join(dir, "issuer.key"))

	r := run(t, "", false, "genesis", "id", path)
	if r.code != ExitOK || r.stdout != id+"\n" || r.stderr != "" {
		t.Fatalf("id: exit %d, stdout %q, stderr %q; want %s", r.code, r.stdout, r.stderr, id)
	}

	// A forged agent_id does not change the answer.
	editFile(t, path, func(o map[string]any) { o["agent_id"] = strings.Repeat("a", 64) })
	r = run(t, "", false, "genesis", "id", path)
	if r.code != ExitOK || r.stdout != id+"\n" || !strings.Contains(r.stderr, "stale") {
		t.Fatalf("forged agent_id: stdout %q, stderr %q; want %s", r.stdout, r.stderr, id)
	}

	// An edit does, and the answer is the ID the edit gives.
	editFile(t, path, func(o map[string]any) { o["owner"] = "Other Corp"; delete(o, "agent_id"); delete(o, "signature") })
	data, _ := os.ReadFile(path)
	want, err := genesis.ComputeAgentID(data)
	if err != nil {
		t.Fatal(err)
	}
	r = run(t, string(data), false, "genesis", "id", "-")
	if r.code != ExitOK || r.stdout != want+"\n" || want == id || !strings.Contains(r.stderr, "no agent_id member") {
		t.Fatalf("edited: stdout %q, stderr %q; want %s", r.stdout, r.stderr, want)
	}

	r = run(t, "[1,2]", false, "genesis", "id", "-")
	if r.code != ExitVerify || !strings.Contains(r.stderr, "genesis-malformed") {
		t.Fatalf("not an object: exit %d\n%s", r.code, r.stderr)
	}
}

func TestGenesisUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // on stdout for help, else on stderr
	}{
		{"help lists every subcommand", []string{"genesis", "--help"}, ExitOK, "agtp genesis register --cacert FILE"},
		{"subcommand help", []string{"genesis", "sign", "-h"}, ExitOK, "usage: agtp genesis sign --key FILE"},
		{"top-level help lists genesis", []string{"--help"}, ExitOK, "genesis  make, sign, verify and register"},
		{"no subcommand", []string{"genesis"}, ExitError, "usage: agtp genesis new"},
		{"unknown subcommand", []string{"genesis", "mint"}, ExitError, `unknown command "mint"`},
		{"unknown flag", []string{"genesis", "id", "--frob", "x"}, ExitError, "flag provided but not defined: -frob"},
		{"verify wants a file", []string{"genesis", "verify"}, ExitError, "name a GENESIS file"},
		{"register wants mTLS", []string{"genesis", "register", "g.json"}, ExitError, "--cacert .state/ca.pem --cert .state/admin.pem --key-tls .state/admin-key.pem"},
		{"register takes one way", []string{"genesis", "register", "--grpc", "h:1", "--admin", "https://h", "g.json"}, ExitError, "give one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", false, tc.args...)
			got := r.stderr
			if tc.code == ExitOK {
				got = r.stdout
			}
			if r.code != tc.code || !strings.Contains(got, tc.out) {
				t.Fatalf("exit %d (want %d), output does not say %q:\nstdout %s\nstderr %s", r.code, tc.code, tc.out, r.stdout, r.stderr)
			}
		})
	}
}

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
