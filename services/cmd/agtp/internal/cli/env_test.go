package cli

import (
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestConnectionFlagsFallBackToTheEnvironment(t *testing.T) {
	a := issueAgent(t)
	srv := startCertServer(t)
	pki := testkit.PKI(t)
	agentFP := agentcert.Fingerprint(readCert(t, a.cert).Raw)
	adminFP := agentcert.Fingerprint(readPEM(t, pki.Cert("admin"), "CERTIFICATE"))
	foreignCA := issueAgent(t).cert // a certificate, but not the server's CA
	other := strings.Repeat("ab", 32)
	full := map[string]string{EnvCACert: srv.ca, EnvCert: a.cert, EnvKey: a.key, EnvAgentID: a.id}
	with := func(drop []string, set map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		for k, v := range set {
			m[k] = v
		}
		return m
	}

	for _, tc := range []struct {
		name    string
		environ map[string]string
		args    []string
		code    int
		cert    string  // fingerprint of the certificate the server must see
		agentID *string // the Agent-ID header sent; nil: none
		stderr  string  // for a failure
	}{
		{"everything from the environment", full, nil, ExitOK, agentFP, &a.id, ""},
		{"a certificate and no Agent-ID", with([]string{EnvAgentID}, nil), nil, ExitOK, agentFP, nil, ""},
		{"--agent-id wins", full, []string{"--agent-id", other}, ExitOK, agentFP, &other, ""},
		{"an empty --agent-id wins too", full, []string{"--agent-id", ""}, ExitOK, agentFP, nil, ""},
		{"--cert and --key win, as a pair", full, []string{"--cert", pki.Cert("admin"), "--key", pki.Key("admin")}, ExitOK, adminFP, &a.id, ""},
		{"--cacert wins", full, []string{"--cacert", foreignCA}, ExitError, "", nil, "unknown authority"},
		{"--cert alone does not take AGTP_KEY", full, []string{"--cert", pki.Cert("admin")}, ExitError, "", nil, "--cert and --key go together"},
		{"--key alone does not take AGTP_CERT", full, []string{"--key", pki.Key("admin")}, ExitError, "", nil, "--cert and --key go together"},
		{"AGTP_CERT without AGTP_KEY", with([]string{EnvKey}, nil), nil, ExitError, "", nil, "AGTP_CERT and AGTP_KEY go together"},
		{"AGTP_KEY without AGTP_CERT", with([]string{EnvCert}, nil), nil, ExitError, "", nil, "AGTP_CERT and AGTP_KEY go together"},
		{"no AGTP_CACERT", with([]string{EnvCACert}, nil), nil, ExitError, "", nil, "unknown authority"},
		{"empty variables are unset", with(nil, map[string]string{EnvCert: "", EnvKey: ""}), nil, ExitError, "", nil, "certificate required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, tc.args...), "QUERY", srv.uri("/"))
			r := runEnv(t, tc.environ, "", false, args...)
			if tc.code != ExitOK {
				if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
					t.Fatalf("exit %d (want %d), stderr does not say %q:\n%s", r.code, tc.code, tc.stderr, r.stderr)
				}
				return
			}
			v := decodeSeen(t, r)
			if v.CertFingerprint != tc.cert {
				t.Fatalf("the server saw certificate %s, want %s", v.CertFingerprint, tc.cert)
			}
			switch {
			case tc.agentID == nil && v.AgentIDHeader != nil:
				t.Fatalf("sent Agent-ID %q, want none", *v.AgentIDHeader)
			case tc.agentID != nil && (v.AgentIDHeader == nil || *v.AgentIDHeader != *tc.agentID):
				t.Fatalf("sent Agent-ID %v, want %s", v.AgentIDHeader, *tc.agentID)
			}
		})
	}
}

func TestAuditVerifyReadsTheEnvironment(t *testing.T) {
	r := runEnv(t, map[string]string{EnvCert: "agent.pem"}, "", false, "audit", "verify", "agtp://127.0.0.1:1")
	if r.code != ExitError || !strings.Contains(r.stderr, "AGTP_CERT and AGTP_KEY go together") {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
}

func TestGenesisCommandsIgnoreTheConnectionEnvironment(t *testing.T) {
	// AGTP_KEY is an agent's TLS key; in the genesis commands --key is
	// the issuer key, and must be given.
	r := runEnv(t, map[string]string{EnvKey: "agent-key.pem"}, "", false, "genesis", "sign", "g.json")
	if r.code != ExitError || !strings.Contains(r.stderr, "--key FILE is required") {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
}

func TestHelpNamesTheEnvironment(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"audit", "verify", "--help"}} {
		r := runEnv(t, nil, "", false, args...)
		for _, v := range []string{EnvCACert, EnvCert, EnvKey, EnvAgentID} {
			if !strings.Contains(r.stdout, v) {
				t.Errorf("agtp %s does not mention %s", strings.Join(args, " "), v)
			}
		}
	}
}
