package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Every abuser stays within its rate and hold bounds, comes from its own
// source addresses, reports what the server did, and releases everything
// on Stop. The fake server enforces no limits (the front door's answers
// are checked in e2e); it shows the abuser's own mechanics.
func TestAbusersAreBoundedAndReportOutcomes(t *testing.T) {
	f := startFake(t)
	tests := []struct {
		kind string
		want string // an outcome label that must appear
	}{
		{AbuseSlowloris, "still open when the abuse stopped"},
		{AbuseOversizedHeader, ""},
		{AbuseOversizedBody, ""},
		{AbuseGarbage, ""},
		{AbuseTLS12, "handshake failed"},
		{AbusePlaintext, "closed without an AGTP answer"},
		{AbuseConnectFlood, "held until the abuse stopped"},
		{AbuseIdleTLSFlood, "held until the abuse stopped"},
		{AbuseQUICFlood, "held until the abuse stopped"},
		{AbuseQUICHandshakeFlood, "ClientHello sent, the answer never read"},
	}
	if len(tests) != len(AbuseKinds) {
		t.Fatalf("%d kinds tested, %d exist", len(tests), len(AbuseKinds))
	}
	const rate, hold = 40, 3
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			a, err := StartAbuse(context.Background(), AbuseConfig{Kind: tt.kind, Target: f.target(), Rate: rate, Hold: hold})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			r := a.Stop()
			if r.Attempts == 0 {
				t.Fatal("no attempts")
			}
			if limit := uint64(rate*r.Elapsed.Seconds()) + 1; r.Attempts+r.Skipped > limit {
				t.Errorf("%d attempts and %d skipped in %v at %d/s", r.Attempts, r.Skipped, r.Elapsed, rate)
			}
			if AbuseDefaults[tt.kind].Hold > 0 && r.MaxHeld > hold {
				t.Errorf("held %d connections, bound %d", r.MaxHeld, hold)
			}
			if len(r.Sources) == 0 || r.Sources[0] != "127.0.0.2" {
				t.Errorf("sources %v, want 127.0.0.2 first", r.Sources)
			}
			if a.Held() != 0 {
				t.Errorf("%d connections still held after Stop", a.Held())
			}
			var total uint64
			for _, n := range r.Outcomes {
				total += n
			}
			if total == 0 || total > r.Attempts {
				t.Errorf("outcomes %v for %d attempts", r.Outcomes, r.Attempts)
			}
			if tt.want != "" && !strings.Contains(r.FormatOutcomes(), tt.want) {
				t.Errorf("outcomes %q lack %q", r.FormatOutcomes(), tt.want)
			}
		})
	}
}

func TestAbuseConfigValidate(t *testing.T) {
	target := Target{Addr: "127.0.0.1:1"}
	tests := []struct {
		name string
		cfg  AbuseConfig
		want string
	}{
		{"unknown kind", AbuseConfig{Kind: "nope", Target: target}, "not one of"},
		{"no target", AbuseConfig{Kind: AbuseGarbage}, "target address"},
		{"rate too high", AbuseConfig{Kind: AbuseGarbage, Target: target, Rate: MaxAbuseRate + 1}, "rate"},
		{"hold too high", AbuseConfig{Kind: AbuseConnectFlood, Target: target, Hold: MaxAbuseHold + 1}, "hold"},
		{"not loopback", AbuseConfig{Kind: AbuseGarbage, Target: target, Sources: []string{"192.0.2.1"}}, "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := StartAbuse(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("StartAbuse = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
