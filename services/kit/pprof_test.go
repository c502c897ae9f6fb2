package kit

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestPprofAddrMustBeLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"", true},
		{"127.0.0.1:6060", true},
		{"[::1]:6060", true},
		{"localhost:6060", true},
		{"0.0.0.0:6060", false},
		{":6060", false},
		{"10.0.0.1:6060", false},
		{"127.0.0.1", false},
	} {
		if err := checkPprofAddr(tc.addr); (err == nil) != tc.ok {
			t.Errorf("checkPprofAddr(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

func TestPprofListenerServesProfilesUntilStopped(t *testing.T) {
	srv, addr, err := startPprof("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), ".test") {
		t.Fatalf("cmdline = %d %q", resp.StatusCode, b)
	}
	stopPprof(srv)
	if _, err := http.Get("http://" + addr + "/debug/pprof/cmdline"); err == nil {
		t.Fatal("the pprof listener still answers after stop")
	}
}
