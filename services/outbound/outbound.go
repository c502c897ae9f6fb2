// Package outbound decides which destinations the suite may reach on a
// caller's word: the webhooks and AGTP hosts that an agent names as an
// ESCALATE or NOTIFY recipient or a DELEGATE target (docs/mechanics.md,
// "Outbound destinations"). Without it, any agent could make the suite
// call its own internal addresses or any host at all.
//
// Two independent checks apply. The allowlist (Options.Webhooks,
// Options.Peers) is matched before anything is stored or sent. The
// address check refuses loopback, private, link-local, unspecified,
// multicast and other non-public addresses: on the name as given
// (CheckAddress) and again on every address the name resolves to when
// it is dialled (DialContext, through a net.Dialer Control function),
// so that a name re-pointed after the first check (DNS rebinding) gains
// nothing. A host the operator names exactly (not by wildcard), and the
// operator's own configured recipients, may be private.
//
// The front door and policysvc both dial through one Policy each, built
// from the same settings (AGTP_OUTBOUND_WEBHOOKS, AGTP_OUTBOUND_PEERS,
// AGTP_OUTBOUND_ALLOW_PRIVATE).
package outbound

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Reason is the AGTP reason of a refused destination (status 403).
const Reason = "recipient-not-allowed"

// ErrNotAllowed matches every refusal of this package (errors.Is).
var ErrNotAllowed = errors.New("destination not allowed")

// Error is a refused destination and why.
type Error struct {
	Destination string
	Why         string
}

func (e *Error) Error() string {
	return e.Destination + " is not an allowed destination: " + e.Why
}

// Is makes errors.Is(err, ErrNotAllowed) true.
func (e *Error) Is(target error) bool { return target == ErrNotAllowed }

func refuse(dest, why string) error { return &Error{Destination: dest, Why: why} }

// Bounds on the configuration.
const (
	maxEntries  = 1024
	maxEntryLen = 512
)

// Options configure a Policy.
type Options struct {
	// Webhooks are the https:// URL prefixes a caller may name as a
	// webhook recipient: https://host[:port][/path-prefix]. host is a
	// name, an IP literal ([v6] in brackets), *.domain (any name below
	// domain, not domain itself) or * (any host); port defaults to 443,
	// * is any port; a path prefix matches whole segments (/hooks
	// matches /hooks and /hooks/a, not /hooksa).
	Webhooks []string `json:"webhooks,omitempty"`
	// Peers are the AGTP hosts a caller may name (NOTIFY to
	// agtp://<id>@host, DELEGATE to a sub-agent there): host[:port],
	// with host as above and port defaulting to 4480.
	Peers []string `json:"peers,omitempty"`
	// AllowPrivate lets every allowed destination resolve to non-public
	// addresses. Off, only hosts named exactly (not by wildcard) in the
	// lists above or trusted may.
	AllowPrivate bool `json:"allow_private,omitempty"`
	// TrustedWebhooks and TrustedPeers are recipients the operator
	// configured (the default escalation recipient, broadcast group
	// members): allowed as they are (a webhook by its exact URL, a peer
	// by its host:port), and their hosts may be private.
	TrustedWebhooks []string `json:"-"`
	TrustedPeers    []string `json:"-"`
	// DialTimeout bounds one TCP connect (default 10 s).
	DialTimeout time.Duration `json:"-"`
}

// Policy is a parsed Options. A nil *Policy allows no caller-named
// destination and refuses non-public addresses. It is safe for
// concurrent use.
type Policy struct {
	webhooks        []webhookRule
	peers           []hostRule
	trustedWebhooks map[string]bool
	trustedPeers    map[string]bool
	// explicit holds the hosts named exactly, each with its ports ("*"
	// for any): they may resolve to private addresses.
	explicit     map[string]map[string]bool
	allowPrivate bool
	dialer       net.Dialer
}

// hostRule matches a host and port.
type hostRule struct {
	host   string // lower case, without brackets or trailing dot; "" with any
	any    bool   // "*"
	suffix bool   // "*.domain": host holds ".domain"
	port   string // "*" for any
}

type webhookRule struct {
	hostRule
	prefix string // "" or "/": any path
}

// New parses the options; every bad entry is reported.
func New(o Options) (*Policy, error) {
	p := &Policy{
		trustedWebhooks: map[string]bool{}, trustedPeers: map[string]bool{}, explicit: map[string]map[string]bool{},
		allowPrivate: o.AllowPrivate,
		dialer:       net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second},
	}
	if p.dialer.Timeout <= 0 {
		p.dialer.Timeout = 10 * time.Second
	}
	var errs []error
	if n := len(o.Webhooks) + len(o.Peers) + len(o.TrustedWebhooks) + len(o.TrustedPeers); n > maxEntries {
		return nil, fmt.Errorf("outbound: %d entries, at most %d", n, maxEntries)
	}
	for _, e := range o.Webhooks {
		r, err := parseWebhookRule(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("outbound webhook %q: %w", e, err))
			continue
		}
		p.webhooks = append(p.webhooks, r)
		p.markExplicit(r.hostRule)
	}
	for _, e := range o.Peers {
		r, err := parseHostRule(e, strconv.Itoa(agtp.DefaultPort))
		if err != nil {
			errs = append(errs, fmt.Errorf("outbound peer %q: %w", e, err))
			continue
		}
		p.peers = append(p.peers, r)
		p.markExplicit(r)
	}
	for _, e := range o.TrustedWebhooks {
		u, host, port, err := parseWebhookURL(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("trusted webhook %q: %w", u, err))
			continue
		}
		p.trustedWebhooks[e] = true
		p.markExplicit(hostRule{host: host, port: port})
	}
	for _, e := range o.TrustedPeers {
		host, port, err := splitHostPort(e, strconv.Itoa(agtp.DefaultPort))
		if err != nil || host == "*" || strings.HasPrefix(host, "*.") || port == "*" {
			errs = append(errs, fmt.Errorf("trusted peer %q: a host:port", e))
			continue
		}
		p.trustedPeers[net.JoinHostPort(host, port)] = true
		p.markExplicit(hostRule{host: host, port: port})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Policy) markExplicit(r hostRule) {
	if r.any || r.suffix {
		return
	}
	if p.explicit[r.host] == nil {
		p.explicit[r.host] = map[string]bool{}
	}
	p.explicit[r.host][r.port] = true
}

// isExplicit reports whether host:port was named exactly by the operator.
func (p *Policy) isExplicit(host, port string) bool {
	if p == nil {
		return false
	}
	ports := p.explicit[normHost(host)]
	return ports["*"] || ports[port]
}

// CheckWebhook decides whether a caller may name rawURL as a webhook
// recipient: it must be trusted as it is, or match an allowlist entry
// (ListedWebhook), and its host must not be written as a non-public
// address it was not allowed to be (CheckAddress).
func (p *Policy) CheckWebhook(rawURL string) error {
	if err := p.ListedWebhook(rawURL); err != nil {
		return err
	}
	if p.trustedWebhooks[rawURL] {
		return nil
	}
	_, host, port, _ := parseWebhookURL(rawURL)
	return p.CheckAddress(net.JoinHostPort(host, port))
}

// ListedWebhook is CheckWebhook without the address check: whether
// rawURL is trusted or on the list.
func (p *Policy) ListedWebhook(rawURL string) error {
	if p != nil && p.trustedWebhooks[rawURL] {
		return nil
	}
	u, host, port, err := parseWebhookURL(rawURL)
	if err != nil {
		return refuse(u, err.Error())
	}
	if strings.Contains(rawURL, "${") {
		return refuse(u, "a caller-named URL may not carry ${...} placeholders")
	}
	path, err := cleanPath(rawURL)
	if err != nil {
		return refuse(u, err.Error())
	}
	matched := false
	if p != nil {
		for _, r := range p.webhooks {
			if r.match(host, port) && underPrefix(path, r.prefix) {
				matched = true
				break
			}
		}
	}
	if !matched {
		return refuse(u, "not on this server's list of webhook destinations (AGTP_OUTBOUND_WEBHOOKS)")
	}
	return nil
}

// CheckPeer decides whether a caller may name the AGTP host hostport
// ("host:port", as agtp.URI.Address gives it): trusted or on the list
// (ListedPeer), and not written as a non-public address it may not be.
func (p *Policy) CheckPeer(hostport string) error {
	if err := p.ListedPeer(hostport); err != nil {
		return err
	}
	host, port, _ := splitHostPort(hostport, strconv.Itoa(agtp.DefaultPort))
	if p.trustedPeers[net.JoinHostPort(host, port)] {
		return nil
	}
	return p.CheckAddress(net.JoinHostPort(host, port))
}

// ListedPeer is CheckPeer without the address check.
func (p *Policy) ListedPeer(hostport string) error {
	host, port, err := splitHostPort(hostport, strconv.Itoa(agtp.DefaultPort))
	if err != nil || host == "*" || strings.HasPrefix(host, "*.") || port == "*" {
		return refuse(hostport, "not a host:port")
	}
	if p != nil && p.trustedPeers[net.JoinHostPort(host, port)] {
		return nil
	}
	matched := false
	if p != nil {
		for _, r := range p.peers {
			if r.match(host, port) {
				matched = true
				break
			}
		}
	}
	if !matched {
		return refuse(hostport, "not on this server's list of AGTP peer hosts (AGTP_OUTBOUND_PEERS)")
	}
	return nil
}

func (r hostRule) match(host, port string) bool {
	if r.port != "*" && r.port != port {
		return false
	}
	switch {
	case r.any:
		return true
	case r.suffix:
		return strings.HasSuffix(host, r.host) && len(host) > len(r.host)
	}
	return host == r.host
}

// underPrefix matches path against a prefix on segment boundaries.
func underPrefix(path, prefix string) bool {
	if prefix == "" || prefix == "/" {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// parseWebhookURL reads a webhook recipient: https, a host, no
// credentials. It returns the URL without query and credentials (for
// messages: a webhook's query may carry a token), the host and the port.
func parseWebhookURL(raw string) (shown, host, port string, err error) {
	shown = "https://"
	if len(raw) > maxEntryLen*4 {
		return shown, "", "", errors.New("the URL is too long")
	}
	u, perr := url.Parse(raw)
	if perr != nil {
		return shown, "", "", errors.New("not a URL")
	}
	redacted := *u
	redacted.User, redacted.RawQuery, redacted.Fragment = nil, "", ""
	shown = redacted.String()
	switch {
	case u.Scheme != "https":
		return shown, "", "", errors.New("a webhook is an https:// URL")
	case u.User != nil:
		return shown, "", "", errors.New("a webhook URL may not carry credentials")
	case u.Host == "" || u.Hostname() == "":
		return shown, "", "", errors.New("the URL has no host")
	}
	host, port, err = splitHostPort(u.Host, "443")
	if err != nil || host == "*" || strings.HasPrefix(host, "*.") || port == "*" {
		return shown, "", "", errors.New("the URL's host is invalid")
	}
	return shown, host, port, nil
}

// cleanPath is a URL's decoded path, refused when it holds dot segments
// or backslashes: the receiver may resolve those above an allowed prefix.
func cleanPath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("not a URL")
	}
	p := u.Path
	if strings.ContainsAny(p, "\\\x00") {
		return "", errors.New("the URL's path holds a backslash or NUL")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return "", errors.New("the URL's path holds dot segments")
		}
	}
	if p == "" {
		p = "/"
	}
	return p, nil
}

func parseWebhookRule(e string) (webhookRule, error) {
	if len(e) > maxEntryLen {
		return webhookRule{}, errors.New("too long")
	}
	rest, ok := strings.CutPrefix(e, "https://")
	if !ok {
		return webhookRule{}, errors.New("an entry is https://host[:port][/path-prefix]")
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if strings.ContainsAny(authority, "@?#") || strings.ContainsAny(path, "?#\\%") {
		return webhookRule{}, errors.New("an entry has no credentials, query, fragment or escapes")
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return webhookRule{}, errors.New("the path prefix holds dot segments")
		}
	}
	r, err := parseHostRule(authority, "443")
	if err != nil {
		return webhookRule{}, err
	}
	return webhookRule{hostRule: r, prefix: path}, nil
}

func parseHostRule(e, defPort string) (hostRule, error) {
	if len(e) > maxEntryLen {
		return hostRule{}, errors.New("too long")
	}
	host, port, err := splitHostPort(e, defPort)
	if err != nil {
		return hostRule{}, err
	}
	switch {
	case host == "*":
		return hostRule{any: true, port: port}, nil
	case strings.HasPrefix(host, "*."):
		d := host[1:]
		if !validName(d[1:]) {
			return hostRule{}, errors.New("*.domain needs a domain name")
		}
		return hostRule{host: d, suffix: true, port: port}, nil
	}
	return hostRule{host: host, port: port}, nil
}

// splitHostPort reads host[:port] or [v6][:port]; port may be "*". The
// host is lower-cased and loses a trailing dot; an IP literal is given
// in its canonical form.
func splitHostPort(s, defPort string) (host, port string, err error) {
	if s == "" {
		return "", "", errors.New("no host")
	}
	host, port = s, defPort
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("unclosed [")
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", "", errors.New("junk after ]")
			}
			port = p
		}
		a, perr := netip.ParseAddr(host)
		if perr != nil || !a.Is6() || a.Zone() != "" {
			return "", "", errors.New("[...] holds an IPv6 address")
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	case strings.Count(s, ":") > 1:
		return "", "", errors.New("an IPv6 address goes in brackets")
	}
	if port != "*" {
		n, perr := strconv.Atoi(port)
		if perr != nil || n <= 0 || n > 65535 || strconv.Itoa(n) != port {
			return "", "", errors.New("invalid port")
		}
	}
	if strings.HasSuffix(host, "*.") {
		return "", "", errors.New("*.domain needs a domain name")
	}
	host = normHost(host)
	if host == "*" || strings.HasPrefix(host, "*.") {
		return host, port, nil
	}
	if _, perr := netip.ParseAddr(host); perr != nil && !validName(host) {
		return "", "", errors.New("invalid host")
	}
	return host, port, nil
}

// normHost lower-cases a host, drops brackets and a trailing dot, and
// writes IP literals canonically.
func normHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String()
	}
	return h
}

// validName is a DNS host name: labels of letters, digits, - and _.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for l := range strings.SplitSeq(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
