package outbound

import (
	"context"
	"errors"
	"flag"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/testkit"
)

func mustNew(t *testing.T, o Options) *Policy {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckWebhook(t *testing.T) {
	p := mustNew(t, Options{
		Webhooks: []string{
			"https://hooks.example.com/agtp",
			"https://pager.example.com:8443/",
			"https://*.alerts.example.net",
			"https://ops.example.org:*/in/",
			"https://203.0.113.9/x", // a documentation address, listed exactly
			"https://[2001:db8::5]:9000",
			"https://*/open", // any host, this path
			"https://internal.corp",
		},
		TrustedWebhooks: []string{"https://10.1.2.3/pager?token=t"},
	})
	for _, tc := range []struct {
		url string
		ok  bool
		why string // part of the refusal
	}{
		{url: "https://hooks.example.com/agtp", ok: true},
		{url: "https://hooks.example.com/agtp/escalations?k=v", ok: true},
		{url: "https://HOOKS.example.com./agtp/x", ok: true},
		{url: "https://hooks.example.com:443/agtp", ok: true},
		{url: "https://hooks.example.com/agtpx", why: "not on this server's list"},
		{url: "https://hooks.example.com/", why: "not on this server's list"},
		{url: "https://hooks.example.com/agtp/../admin", why: "dot segments"},
		{url: "https://hooks.example.com/agtp/%2e%2e/admin", why: "dot segments"},
		{url: "https://hooks.example.com/agtp\\..\\admin", why: "backslash"},
		{url: "https://hooks.example.com:8443/agtp", why: "not on this server's list"},
		{url: "http://hooks.example.com/agtp", why: "https"},
		{url: "https://user:pw@hooks.example.com/agtp", why: "credentials"},
		{url: "https://hooks.example.com/agtp/${AGTP_SECRET}", why: "placeholders"},
		{url: "https://pager.example.com:8443/any/path", ok: true},
		{url: "https://pager.example.com/any/path", why: "not on this server's list"},
		{url: "https://a.alerts.example.net/x", ok: true},
		{url: "https://a.b.alerts.example.net/", ok: true},
		{url: "https://alerts.example.net/", why: "not on this server's list"},
		{url: "https://evilalerts.example.net/", why: "not on this server's list"},
		{url: "https://ops.example.org:1234/in/x", ok: true},
		{url: "https://ops.example.org:1234/inx", why: "not on this server's list"},
		{url: "https://203.0.113.9/x/y", ok: true},
		{url: "https://[2001:db8::5]:9000/z", ok: true},
		{url: "https://[2001:DB8:0::5]:9000/z", ok: true},
		{url: "https://any.example/open/1", ok: true},
		// On the list by wildcard, but written as a non-public address.
		{url: "https://127.0.0.1/open", why: "loopback"},
		{url: "https://169.254.169.254/open/latest/meta-data", why: "link-local"},
		{url: "https://[::ffff:127.0.0.1]/open", why: "loopback"},
		{url: "https://10.0.0.1/open", why: "private"},
		{url: "https://localhost/open", why: "loopback name"},
		{url: "https://api.localhost/open", why: "loopback name"},
		{url: "https://[fe80::1]/open", why: "link-local"},
		{url: "https://0.0.0.0/open", why: "unspecified"},
		{url: "https://internal.corp/anything", ok: true},
		{url: "https://10.1.2.3/pager?token=t", ok: true},
		{url: "https://10.1.2.3/pager?token=other", why: "not on this server's list"},
		{url: "https://", why: "no host"},
		{url: "not a url at all", why: "https"},
	} {
		err := p.CheckWebhook(tc.url)
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckWebhook(%q) = %v, want allowed", tc.url, err)
		case !tc.ok && err == nil:
			t.Errorf("CheckWebhook(%q) allowed, want refused (%s)", tc.url, tc.why)
		case !tc.ok && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), tc.why)):
			t.Errorf("CheckWebhook(%q) = %v, want a refusal naming %q", tc.url, err, tc.why)
		}
		if err != nil && strings.Contains(err.Error(), "token=") {
			t.Errorf("CheckWebhook(%q) error shows the query: %v", tc.url, err)
		}
	}
}

func TestCheckPeer(t *testing.T) {
	p := mustNew(t, Options{
		Peers:        []string{"agtp.partner.example", "*.agents.example:*", "127.0.0.1:9000", "[::1]:*", "10.9.9.9:4480"},
		TrustedPeers: []string{"192.168.1.20:4480"},
	})
	for _, tc := range []struct {
		hostport string
		ok       bool
		why      string
	}{
		{hostport: "agtp.partner.example:4480", ok: true},
		{hostport: "AGTP.partner.example.:4480", ok: true},
		{hostport: "agtp.partner.example:4481", why: "not on this server's list"},
		{hostport: "x.agents.example:1", ok: true},
		{hostport: "agents.example:4480", why: "not on this server's list"},
		{hostport: "127.0.0.1:9000", ok: true},
		{hostport: "127.0.0.1:7102", why: "not on this server's list"},
		{hostport: "[::1]:7102", ok: true},
		{hostport: "10.9.9.9:4480", ok: true},
		{hostport: "192.168.1.20:4480", ok: true},
		{hostport: "192.168.1.20:4481", why: "not on this server's list"},
		{hostport: "evil.example:4480", why: "not on this server's list"},
		{hostport: "*:4480", why: "not a host:port"},
	} {
		err := p.CheckPeer(tc.hostport)
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckPeer(%q) = %v, want allowed", tc.hostport, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.why)):
			t.Errorf("CheckPeer(%q) = %v, want a refusal naming %q", tc.hostport, err, tc.why)
		}
	}
	// A wildcard entry lets names through, never written private addresses.
	open := mustNew(t, Options{Peers: []string{"*:*"}})
	if err := open.CheckPeer("partner.example:4480"); err != nil {
		t.Errorf("open peers refused a public name: %v", err)
	}
	for _, hp := range []string{"127.0.0.1:7102", "[::1]:4480", "169.254.169.254:80", "172.16.0.1:4480", "localhost:4480"} {
		if err := open.CheckPeer(hp); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("open peers allowed %s: %v", hp, err)
		}
	}
	allow := mustNew(t, Options{Peers: []string{"*:*"}, AllowPrivate: true})
	if err := allow.CheckPeer("127.0.0.1:7102"); err != nil {
		t.Errorf("AllowPrivate refused loopback: %v", err)
	}
	var none *Policy
	if err := none.CheckPeer("partner.example:4480"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("nil policy allowed a peer: %v", err)
	}
	if err := none.CheckWebhook("https://hooks.example/x"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("nil policy allowed a webhook: %v", err)
	}
}

func TestNewRefusesBadEntries(t *testing.T) {
	for _, o := range []Options{
		{Webhooks: []string{"http://hooks.example"}},
		{Webhooks: []string{"hooks.example"}},
		{Webhooks: []string{"https://user@hooks.example"}},
		{Webhooks: []string{"https://hooks.example/a?b=c"}},
		{Webhooks: []string{"https://hooks.example/a/../b"}},
		{Webhooks: []string{"https://hooks.example:0"}},
		{Webhooks: []string{"https://hooks.example:99999"}},
		{Webhooks: []string{"https://*."}},
		{Webhooks: []string{"https://ho_ok$.example"}},
		{Peers: []string{"::1"}},
		{Peers: []string{"[::1"}},
		{Peers: []string{"host:abc"}},
		{Peers: []string{""}},
		{TrustedPeers: []string{"*.example:4480"}},
		{TrustedWebhooks: []string{"http://x.example"}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted a bad entry", o)
		}
	}
}

func TestNonPublic(t *testing.T) {
	for _, tc := range []struct {
		ip     string
		public bool
	}{
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"127.8.9.10", false},
		{"::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"172.32.0.1", true},
		{"192.168.0.1", false},
		{"169.254.169.254", false},
		{"fe80::1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"ff02::1", false},
		{"255.255.255.255", false},
		{"100.64.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::7f00:1", false},
		{"2002:7f00:1::", false},
		{"fec0::1", false},
	} {
		got := NonPublic(netip.MustParseAddr(tc.ip))
		if (got == "") != tc.public {
			t.Errorf("NonPublic(%s) = %q, want public %v", tc.ip, got, tc.public)
		}
	}
}

func TestControl(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"8.8.8.8:443", true},
		{"[2606:4700::1111]:443", true},
		{"127.0.0.1:7102", false},
		{"[::1]:4480", false},
		{"169.254.169.254:80", false},
		{"10.0.0.1:443", false},
		{"[::ffff:127.0.0.1]:443", false},
		{"localhost:443", false}, // never a name at this stage
	} {
		err := Control("tcp4", tc.addr, nil)
		if (err == nil) != tc.ok {
			t.Errorf("Control(%s) = %v, want ok %v", tc.addr, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("Control(%s) = %v, not ErrNotAllowed", tc.addr, err)
		}
	}
}

// TestDialContextChecksResolvedAddresses dials a real loopback listener:
// a name that resolves to it (localhost) is refused as it is connected
// to, unless the operator named the host exactly or allowed private
// destinations.
func TestDialContextChecksResolvedAddresses(t *testing.T) {
	addr, accepted := testkit.CountingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		opts   Options
		target string
		ok     bool
	}{
		{name: "a name resolving to loopback, wildcard list", opts: Options{Peers: []string{"*:*"}}, target: "localhost:" + port},
		{name: "a loopback literal, wildcard list", opts: Options{Peers: []string{"*:*"}}, target: addr},
		{name: "nil policy", target: addr},
		{name: "the loopback host listed exactly", opts: Options{Peers: []string{"127.0.0.1:" + port}}, target: addr, ok: true},
		{name: "the loopback host listed exactly, any port", opts: Options{Webhooks: []string{"https://127.0.0.1:*"}}, target: addr, ok: true},
		{name: "listed exactly on another port", opts: Options{Peers: []string{"127.0.0.1:1"}}, target: addr},
		{name: "a trusted peer", opts: Options{TrustedPeers: []string{addr}}, target: addr, ok: true},
		{name: "private destinations allowed", opts: Options{AllowPrivate: true}, target: "localhost:" + port, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *Policy
			if tc.name != "nil policy" {
				p = mustNew(t, tc.opts)
			}
			before := accepted.Load()
			conn, err := p.DialContext(ctx, "tcp", tc.target)
			if conn != nil {
				_ = conn.Close()
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("dial %s = %v, want connected", tc.target, err)
				}
				// The listener counts the connection on its own goroutine:
				// let it, or the next case would see it as its own.
				testkit.WaitFor(t, 5*time.Second, "the listener to accept the connection", func() bool { return accepted.Load() > before })
				return
			}
			if !errors.Is(err, ErrNotAllowed) {
				t.Fatalf("dial %s = %v, want ErrNotAllowed", tc.target, err)
			}
			var oe *Error
			if !errors.As(err, &oe) || !strings.Contains(oe.Why, "loopback") {
				t.Fatalf("dial %s = %v, want a refusal naming loopback", tc.target, err)
			}
			time.Sleep(20 * time.Millisecond)
			if n := accepted.Load() - before; n != 0 {
				t.Fatalf("the listener accepted %d connections for a refused dial", n)
			}
		})
	}
}

func TestFlagsAndEnv(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"-outbound-webhooks", "https://a.example, https://b.example/x", "-outbound-peers", "p.example", "-outbound-allow-private"}); err != nil {
		t.Fatal(err)
	}
	if len(o.Webhooks) != 2 || o.Webhooks[1] != "https://b.example/x" || len(o.Peers) != 1 || !o.AllowPrivate {
		t.Fatalf("flags = %+v", o)
	}
	env := map[string]string{EnvWebhooks: "https://c.example", EnvPeers: " q.example:1 ,, r.example ", EnvAllowPrivate: "false"}
	if err := o.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if len(o.Webhooks) != 1 || len(o.Peers) != 2 || o.Peers[0] != "q.example:1" || o.AllowPrivate {
		t.Fatalf("env = %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	env[EnvAllowPrivate] = "maybe"
	if err := o.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil {
		t.Fatal("a bad boolean was accepted")
	}
}
