package rcnssvc

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// startupLog runs start with the process's standard error, where
// kit.NewBase sends a service's log, captured, closes what it started,
// and returns the log.
func startupLog(t *testing.T, start func() (io.Closer, error)) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		read <- string(b)
	}()
	stderr := os.Stderr
	os.Stderr = w
	svc, err := start()
	if err == nil {
		err = svc.Close()
	}
	os.Stderr = stderr
	_ = w.Close()
	log := <-read
	_ = r.Close()
	if err != nil {
		t.Fatalf("start: %v\nlog:\n%s", err, log)
	}
	return log
}

// TestStartupWarnsOfTheDemo checks that rcnssvc's demo (RCNS on, the
// demo patterns, trust tier 2 admitted) says so at start-up as a
// warning, and that it does not otherwise.
func TestStartupWarnsOfTheDemo(t *testing.T) {
	warnings := map[string]string{
		"demo": "demo is on: RCNS is enabled with the demo synthesis patterns and callers of trust tier 2 (org-asserted) may negotiate contracts; for development only (AGTP_DEMO, -demo)",
	}
	cases := []struct {
		name string
		demo bool
		want []string
	}{
		{"defaults", false, nil},
		{"demo", true, []string{"demo"}},
	}
	l := testkit.PKI(t)
	redis := testkit.StartRedis(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.LogFormat = "127.0.0.1:0", "127.0.0.1:0", "json"
			cfg.CAFile, cfg.CertFile, cfg.KeyFile = l.CA(), l.Cert("rcnssvc"), l.Key("rcnssvc")
			cfg.RedisURL = redis.URL()
			// Connections are made on first use, which these never see.
			cfg.Peers = map[string]string{"catalogsvc": "127.0.0.1:1", "policysvc": "127.0.0.1:1", "auditsvc": "127.0.0.1:1"}
			cfg.Demo = tc.demo
			log := startupLog(t, func() (io.Closer, error) { return New(context.Background(), cfg) })
			checkWarnings(t, log, warnings, tc.want)
		})
	}
}

// checkWarnings fails unless the JSON log has a WARN record holding each
// of want, once, and none holding the other warnings of all.
func checkWarnings(t *testing.T, log string, all map[string]string, want []string) {
	t.Helper()
	for _, name := range want {
		if _, ok := all[name]; !ok {
			t.Fatalf("unknown warning %q", name)
		}
	}
	var records []struct{ Level, Msg string }
	for line := range strings.Lines(log) {
		var r struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		records = append(records, r)
	}
	for name, text := range all {
		found := 0
		for _, r := range records {
			if strings.Contains(r.Msg, text) {
				found++
				if r.Level != "WARN" {
					t.Errorf("%s is logged at %s, not WARN: %s", name, r.Level, r.Msg)
				}
			}
		}
		switch wanted := slices.Contains(want, name); {
		case wanted && found != 1:
			t.Errorf("%d %s warnings (%q) in the start-up log, want 1:\n%s", found, name, text, log)
		case !wanted && found > 0:
			t.Errorf("a %s warning (%q) the configuration does not call for:\n%s", name, text, log)
		}
	}
}
