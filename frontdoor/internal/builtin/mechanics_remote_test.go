package builtin

import (
	"strings"
	"testing"
)

func TestDelegateeOf(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		target, id, addr string
		ok               bool
	}{
		{target: id, id: id, ok: true},
		{target: "agtp://" + id, id: id, ok: true},
		{target: "agtp://" + id + "@agents.example", id: id, addr: "agents.example:4480", ok: true},
		{target: "agtp://" + id + "@127.0.0.1:9443/", id: id, addr: "127.0.0.1:9443", ok: true},
		{target: "agtp://" + id + "@agents.example/orders"},
		{target: "agtp://agents.example"},
		{target: "agtp://acme.example/agents/booker"},
		{target: strings.ToUpper(id)},
		{target: ""},
	} {
		gotID, gotAddr, ok := delegateeOf(tc.target)
		if ok != tc.ok || ok && (gotID != tc.id || gotAddr != tc.addr) {
			t.Errorf("delegateeOf(%q) = %q, %q, %v; want %q, %q, %v", tc.target, gotID, gotAddr, ok, tc.id, tc.addr, tc.ok)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example/esc?token=s3cret":   "https://hooks.example/esc",
		"https://user:pw@hooks.example/esc#frag":   "https://hooks.example/esc",
		"admin":                                    "admin",
		"agtp://" + strings.Repeat("a", 64) + "@h": "agtp://" + strings.Repeat("a", 64) + "@h",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWebhookHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example/esc?token=s3cret": "hooks.example:443",
		"https://hooks.example:8443/esc":         "hooks.example:8443",
		"https://[::1]:9000/x":                   "[::1]:9000",
		"https://127.0.0.1/x":                    "127.0.0.1:443",
		"admin":                                  "",
		"https://":                               "",
	} {
		if got := webhookHostPort(in); got != want {
			t.Errorf("webhookHostPort(%q) = %q, want %q", in, got, want)
		}
	}
}
