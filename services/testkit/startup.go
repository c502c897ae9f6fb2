package testkit

import (
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// StartupLog runs start with the process's standard error, where
// kit.NewBase sends a service's log, captured, closes what it started,
// and returns the log.
func StartupLog(t testing.TB, start func() (io.Closer, error)) string {
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

// CheckWarnings fails unless the JSON log has a WARN record holding the
// text of each warning named in want, once, and none holding the text of
// the other warnings of all (name → text).
func CheckWarnings(t testing.TB, log string, all map[string]string, want []string) {
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
