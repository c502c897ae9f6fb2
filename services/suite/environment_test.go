package suite

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/testkit"
)

// mapEnv is an environment for Config.LookupEnv.
func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// TestEnvironmentLayers: the environment reaches every service through
// its own ApplyEnv, except where the suite sets a setting itself; the
// report names what changed which service, and what was ignored.
func TestEnvironmentLayers(t *testing.T) {
	l := devpki.Layout{Dir: t.TempDir()}
	env := mapEnv(map[string]string{
		"AGTP_AGP_EXECUTE_POLICY":     "confirm",
		"AGTP_AGP_MAX_EXECUTE_AMOUNT": "100", // the default: changes nothing
		"AGTP_SERVER_ID":              "suite.example",
		"AGTP_OUTBOUND_WEBHOOKS":      "https://hooks.example/agtp",
		"LOG_FORMAT":                  "json",
		"LOG_LEVEL":                   "debug",
		"PPROF_ADDR":                  "127.0.0.1:6060",
		"REDIS_URL":                   "redis://:hunter2@127.0.0.1:6379/0",
		"AGTP_DEMO":                   "false",
		"GRPC_ADDR":                   "0.0.0.0:7000",
		"AGTP_CA_FILE":                "/elsewhere/ca.pem",
		"AGTP_PEERS":                  "auditsvc=10.0.0.1:7105",
		"AGTP_AGENT_CA_CERT_FILE":     "/elsewhere/agent-ca.pem",
	})
	cfg := Config{StateDir: l.Dir, LogLevel: "warn"}
	v, err := configure(cfg, l, env, envFirst)
	if err != nil {
		t.Fatal(err)
	}
	def, err := configure(cfg, l, noEnv, envFirst)
	if err != nil {
		t.Fatal(err)
	}

	if v.policy.AGP.ExecutePolicy != "confirm" || def.policy.AGP.ExecutePolicy != "open" {
		t.Fatalf("execute policy %q, default %q", v.policy.AGP.ExecutePolicy, def.policy.AGP.ExecutePolicy)
	}
	if v.catalog.Options.Manifest.ServerID != "suite.example" || v.audit.ServerID != "suite.example" || v.front.ServerID != "suite.example" {
		t.Fatal("AGTP_SERVER_ID did not reach catalogsvc, auditsvc and the front door")
	}
	// The environment replaces the suite's outbound defaults, list by list.
	for _, o := range [][]string{v.policy.Tasks.Outbound.Webhooks, v.front.Outbound.Webhooks} {
		if !slices.Equal(o, []string{"https://hooks.example/agtp"}) {
			t.Fatalf("outbound webhooks %v", o)
		}
	}
	if !slices.Equal(v.front.Outbound.Peers, def.front.Outbound.Peers) || len(def.front.Outbound.Peers) == 0 {
		t.Fatalf("outbound peers %v, want the suite's %v", v.front.Outbound.Peers, def.front.Outbound.Peers)
	}
	for _, m := range v.each() {
		c := m.common
		if c.LogFormat != "json" || c.LogLevel != "warn" || c.RedisURL != "redis://:hunter2@127.0.0.1:6379/0" {
			t.Errorf("%s: log %s/%s, redis %s", m.name, c.LogFormat, c.LogLevel, c.RedisURL)
		}
		if c.CAFile != l.CA() || c.CertFile != l.Cert(m.name) || c.SigningKeyFile != l.SigningKey() {
			t.Errorf("%s: PKI %s %s %s, want the state directory's", m.name, c.CAFile, c.CertFile, c.SigningKeyFile)
		}
		if c.GRPCAddr == "0.0.0.0:7000" || c.Peers["auditsvc"] != v.audit.GRPCAddr {
			t.Errorf("%s: gRPC %s, peers %v: the environment's, not the suite's", m.name, c.GRPCAddr, c.Peers)
		}
		if want := m.name == "frontdoor"; (c.PprofAddr != "") != want {
			t.Errorf("%s: pprof %q", m.name, c.PprofAddr)
		}
	}
	if !v.catalog.Options.DemoEndpoints || !v.rcns.Demo || !v.front.Demo {
		t.Fatal("AGTP_DEMO=false turned make run's demo off")
	}
	if v.identity.AgentCACertFile != l.AgentCA() {
		t.Fatalf("agent CA %s", v.identity.AgentCACertFile)
	}

	report, err := environmentReport(cfg, l, env)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]envSetting{}
	for _, e := range report {
		got[e.name] = e
	}
	every := []string{"auditsvc", "catalogsvc", "identitysvc", "policysvc", "rcnssvc", "frontdoor"}
	for name, want := range map[string][]string{
		"AGTP_AGP_EXECUTE_POLICY": {"policysvc"},
		"AGTP_SERVER_ID":          {"auditsvc", "catalogsvc", "frontdoor"},
		"AGTP_OUTBOUND_WEBHOOKS":  {"policysvc", "frontdoor"},
		"LOG_FORMAT":              every,
		"REDIS_URL":               every,
		"PPROF_ADDR":              {"frontdoor"},
	} {
		if e, ok := got[name]; !ok || e.overridden || !slices.Equal(e.services, want) {
			t.Errorf("%s: reported %+v, want it changing %v", name, e, want)
		}
	}
	for _, name := range []string{"LOG_LEVEL", "AGTP_DEMO", "GRPC_ADDR", "AGTP_CA_FILE", "AGTP_PEERS", "AGTP_AGENT_CA_CERT_FILE"} {
		if e, ok := got[name]; !ok || !e.overridden || len(e.services) != 0 {
			t.Errorf("%s: reported %+v, want it overridden", name, e)
		}
	}
	if e, ok := got["AGTP_AGP_MAX_EXECUTE_AMOUNT"]; ok {
		t.Errorf("a setting equal to its default is reported: %+v", e)
	}
	if len(got) != 12 {
		t.Errorf("report %+v", report)
	}
	if v := got["REDIS_URL"].value; strings.Contains(v, "hunter2") {
		t.Errorf("the report shows the Redis password: %s", v)
	}

	// Without an environment nothing is reported.
	if report, err := environmentReport(cfg, l, noEnv); err != nil || len(report) != 0 {
		t.Fatalf("report without environment: %+v, %v", report, err)
	}
	// A malformed setting stops the suite, naming the service.
	if _, err := configure(cfg, l, mapEnv(map[string]string{"AGTP_NOTIFY_MAX_BACKOFF": "soon"}), envFirst); err == nil || !strings.Contains(err.Error(), "policysvc") {
		t.Fatalf("malformed setting: %v", err)
	}
}

// TestSuiteHonoursTheEnvironment: a setting given through the suite's
// environment reaches the running service (policysvc's AGP execute
// policy, seen through the front door's AGP binding), the banner names
// it, and the settings the suite sets itself are ignored and named too.
func TestSuiteHonoursTheEnvironment(t *testing.T) {
	out := &testkit.SyncBuffer{}
	s := startTestSuite(t, Config{Out: out,
		LookupEnv: mapEnv(map[string]string{
			"AGTP_AGP_EXECUTE_POLICY": "confirm",
			// The suite's own: honoured, they would stop it.
			"GRPC_ADDR":    "127.0.0.1:1",
			"AGTP_CA_FILE": filepath.Join(t.TempDir(), "no-such-ca.pem"),
		}),
	})
	ctx := context.Background()
	testkit.WaitFor(t, 30*time.Second, "the banner", func() bool { return strings.Contains(out.String(), "/agp/discover") })
	banner := out.String()
	for _, want := range []string{
		"settings from the environment:\n    AGTP_AGP_EXECUTE_POLICY=confirm  policysvc\n",
		"ignored, make run sets these itself: AGTP_CA_FILE, GRPC_ADDR\n",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("the banner lacks %q:\n%s", want, banner)
		}
	}

	key, err := os.ReadFile(filepath.Join(s.StateDir(), "demo-agent", "agp-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	body := `{"businessId":"orders","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"widget","quantity":1}]}}}`
	execute := func() (int, []byte, string) {
		req, err := http.NewRequestWithContext(ctx, "POST", "https://"+s.HTTPSAddr()+"/agp/execute", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", strings.TrimSpace(string(key)))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var res struct{ Code string }
		_ = json.Unmarshal(b, &res)
		return resp.StatusCode, b, res.Code
	}
	// The front door knows the demo business once the catalog snapshot
	// with its endpoints has arrived, a moment after start-up.
	var status int
	var b []byte
	var code string
	testkit.WaitFor(t, 20*time.Second, "the demo business to be served", func() bool {
		status, b, code = execute()
		return code != "BUSINESS_NOT_FOUND"
	})
	// Under the default policy (open) the order is created.
	if status != http.StatusForbidden || code != "CONFIRMATION_REQUIRED" {
		t.Fatalf("execute without a confirmation token = %d %s, want 403 CONFIRMATION_REQUIRED", status, b)
	}
}
