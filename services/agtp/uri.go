package agtp

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// DefaultPort is the IANA-assigned AGTP port, for TCP and for QUIC
// (core §11.1). A URI without a port means this one.
const DefaultPort = 4480

// URIForm is one of the agtp:// URI forms of core §6.1.2.
type URIForm uint8

// The URI forms. Forms 2 and 2a are the same syntax when the host is a
// domain name without a port; ParseURI then reports Form 2a, and a
// client treats both alike (connect to the host on DefaultPort).
const (
	FormCanonical      URIForm = iota + 1 // 1:  agtp://{agent-id}
	FormCanonicalHost                     // 1a: agtp://{agent-id}@{host}[:port]
	FormServer                            // 2:  agtp://{host}[:port], host any RFC 3986 host
	FormOrganization                      // 2a: agtp://{domain}
	FormDomainAgent                       // 3:  agtp://{domain}/agents/{agent-name}
	FormSubdomainAgent                    // 4:  agtp://agtp.{domain}/agents/{agent-name}
)

func (f URIForm) String() string {
	switch f {
	case FormCanonical:
		return "1"
	case FormCanonicalHost:
		return "1a"
	case FormServer:
		return "2"
	case FormOrganization:
		return "2a"
	case FormDomainAgent:
		return "3"
	case FormSubdomainAgent:
		return "4"
	}
	return "unknown"
}

// Values of the format query parameter (core §6.1.7).
const (
	FormatManifest    = "manifest" // the default
	FormatJSON        = "json"
	FormatCertificate = "certificate"
	FormatStatus      = "status"
)

// URI is a parsed agtp:// URI. Any form may be followed by an endpoint
// path and a query (core §6.1.4, "METHOD agtp://[locator]/[endpoint-path]"),
// which is how a client names the request-target to send.
//
// URI is comparable, and ParseURI(u.String()) == u for every URI that
// ParseURI returned.
type URI struct {
	Form URIForm
	// AgentID is the canonical Agent-ID (64 lowercase hex) of Forms 1
	// and 1a. In Form 1a it identifies; Host is only where to ask, and a
	// client must reject an Identity Document whose agent_id differs.
	AgentID string
	// Host is a lower-case host name, or an IPv4 or IPv6 address (without
	// brackets); empty in Form 1.
	Host string
	// Port is the explicit port, or 0 for DefaultPort. Only Forms 1a and
	// 2 may carry one.
	Port int
	// AgentName is the local agent name of Forms 3 and 4, without any
	// package extension.
	AgentName string
	// Path is the raw endpoint path, "" when the URI has none. For Forms
	// 3 and 4 it starts with /agents/{agent-name}.
	Path string
	// RawQuery is the raw query without '?'.
	RawQuery string
}

// ParseURI parses an agtp:// URI (core §6.1.3). Errors are
// *ProtocolError values with status 400: reason invalid-canonical-id when
// the Agent-ID of Form 1 or 1a is malformed (core §6.1.8.1), and
// invalid-uri-form for anything else (core §6.1.8.3).
//
// The scheme is matched case-insensitively and host names are lowered.
// A path ending in a package extension (.agent, .nomo, .agtp) parses, so
// that a server can answer it with 301 to [URI.Canonical] (core §6.1.6).
//
// The grammar lets a 64-hex string be a host name too. No DNS label is
// longer than 63 bytes, so an authority made only of hex digits and at
// least 64 long is read as an Agent-ID (docs/decisions.md#D-uri-form1).
func ParseURI(s string) (URI, error) {
	const scheme = "agtp://"
	if len(s) < len(scheme) || !equalFold(s[:len(scheme)], scheme) {
		return URI{}, uriFormError("an AGTP URI starts with agtp://")
	}
	rest := s[len(scheme):]
	if strings.IndexByte(rest, '#') >= 0 {
		return URI{}, uriFormError("an AGTP URI has no fragment")
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	var u URI
	u.Path, u.RawQuery, _ = strings.Cut(tail, "?")
	if u.Path != "" {
		if p := targetProblem(u.Path); p != "" {
			return URI{}, uriFormError("endpoint path: " + p)
		}
	}
	if p := charsProblem(u.RawQuery); p != "" {
		return URI{}, uriFormError("query: " + p)
	}

	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		id := authority[:at]
		if !isCanonicalID(id) {
			return URI{}, canonicalIDError("the part before '@' must be a canonical Agent-ID (64 lowercase hex digits)")
		}
		host, port, err := parseHostPort(authority[at+1:])
		if err != nil {
			return URI{}, err
		}
		u.Form, u.AgentID, u.Host, u.Port = FormCanonicalHost, id, host, port
		return u, nil
	}

	hostPart, _, hasPort := splitPort(authority)
	if looksLikeAgentID(hostPart) {
		if !isCanonicalID(hostPart) {
			return URI{}, canonicalIDError("a canonical Agent-ID is exactly 64 lowercase hex digits")
		}
		if hasPort {
			return URI{}, uriFormError("a port may appear only in Forms 1a and 2")
		}
		u.Form, u.AgentID = FormCanonical, hostPart
		return u, nil
	}
	host, port, err := parseHostPort(authority)
	if err != nil {
		return URI{}, err
	}
	u.Host, u.Port = host, port
	switch {
	case hasPort || !isDomain(host):
		u.Form = FormServer
	default:
		name, ok, err := agentName(u.Path)
		if err != nil {
			return URI{}, err
		}
		switch {
		case !ok:
			u.Form = FormOrganization
		case strings.HasPrefix(host, "agtp.") && isDomain(host[len("agtp."):]):
			u.Form, u.AgentName = FormSubdomainAgent, name
		default:
			u.Form, u.AgentName = FormDomainAgent, name
		}
	}
	return u, nil
}

// String returns u in canonical spelling.
func (u URI) String() string {
	var b strings.Builder
	b.WriteString("agtp://")
	if u.AgentID != "" {
		b.WriteString(u.AgentID)
		if u.Host != "" {
			b.WriteByte('@')
		}
	}
	if strings.IndexByte(u.Host, ':') >= 0 {
		b.WriteByte('[')
		b.WriteString(u.Host)
		b.WriteByte(']')
	} else {
		b.WriteString(u.Host)
	}
	if u.Port != 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(u.Port))
	}
	b.WriteString(u.Path)
	if u.RawQuery != "" {
		b.WriteByte('?')
		b.WriteString(u.RawQuery)
	}
	return b.String()
}

// ParseAgentURI reads a URI that names an agent and nothing else:
// agtp://{agent-id} (Form 1, an agent this server resolves: addr is "")
// or agtp://{agent-id}@{host}[:port] (Form 1a: addr is the host:port to
// dial), with no path beyond "/" and no query. Recipients, delegatees and
// callbacks are named this way.
func ParseAgentURI(s string) (agentID, addr string, ok bool) {
	u, err := ParseURI(s)
	if err != nil || u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return "", "", false
	}
	switch u.Form {
	case FormCanonical:
		return u.AgentID, "", true
	case FormCanonicalHost:
		return u.AgentID, u.Address(), true
	}
	return "", "", false
}

// Address returns the host:port to dial, with DefaultPort when the URI
// has no port, or "" for Form 1, which must be resolved through a
// registry first (core §6.1.8.1).
func (u URI) Address() string {
	if u.Host == "" {
		return ""
	}
	port := u.Port
	if port == 0 {
		port = DefaultPort
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(port))
}

// Domain returns the organisation's domain for Forms 2a, 3 and 4 (for
// Form 4, Host without its "agtp." label), and "" otherwise.
func (u URI) Domain() string {
	switch u.Form {
	case FormOrganization, FormDomainAgent:
		return u.Host
	case FormSubdomainAgent:
		return strings.TrimPrefix(u.Host, "agtp.")
	}
	return ""
}

// Target returns the request-target a client sends for u: Path ("/" when
// empty) plus the query.
func (u URI) Target() string {
	t := u.Path
	if t == "" {
		t = "/"
	}
	if u.RawQuery != "" {
		t += "?" + u.RawQuery
	}
	return t
}

// Format returns the format query parameter (core §6.1.7), or "" when
// absent, which means FormatManifest.
func (u URI) Format() string {
	v, _ := url.ParseQuery(u.RawQuery)
	return v.Get("format")
}

// Canonical returns u with any package extension removed from the end of
// its path and reports whether there was one. A server answers a
// non-canonical URI with 301 to the canonical one (core §6.1.6).
func (u URI) Canonical() (URI, bool) {
	p, ok := StripPackageExtension(u.Path)
	u.Path = p
	return u, ok
}

// packageExtensions may never appear in an AGTP URI (core §6.1.1).
var packageExtensions = [...]string{".agent", ".nomo", ".agtp"}

// StripPackageExtension removes a trailing .agent, .nomo or .agtp
// (any case) from the last segment of path and reports whether it did.
// A segment that is only the extension is left alone.
func StripPackageExtension(path string) (string, bool) {
	seg := path[strings.LastIndexByte(path, '/')+1:]
	for _, ext := range packageExtensions {
		if len(seg) > len(ext) && equalFold(seg[len(seg)-len(ext):], ext) {
			return path[:len(path)-len(ext)], true
		}
	}
	return path, false
}

func uriFormError(explanation string) *ProtocolError {
	return badRequest(ReasonInvalidURIForm, explanation, false)
}

func canonicalIDError(explanation string) *ProtocolError {
	return badRequest(ReasonInvalidCanonicalID, explanation, false)
}

// CanonicalIDLen is the length of a canonical Agent-ID (core §6.1.2):
// 256 bits as lowercase hex.
const CanonicalIDLen = 64

// IsCanonicalID reports whether s is a canonical Agent-ID: exactly 64
// lowercase hex digits (core §6.1.2).
func IsCanonicalID(s string) bool { return isCanonicalID(s) }

func isCanonicalID(s string) bool {
	if len(s) != CanonicalIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// looksLikeAgentID reports whether s can only have been meant as an
// Agent-ID: all hex digits and too long for a DNS label.
func looksLikeAgentID(s string) bool {
	if len(s) < 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if charClass[s[i]]&cHex == 0 {
			return false
		}
	}
	return true
}

// splitPort splits "host:port" and "[v6]:port"; the port is not checked.
func splitPort(authority string) (host, port string, hasPort bool) {
	if strings.HasPrefix(authority, "[") {
		i := strings.IndexByte(authority, ']')
		if i < 0 || i+1 == len(authority) || authority[i+1] != ':' {
			return authority, "", false
		}
		return authority[:i+1], authority[i+2:], true
	}
	if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		return authority[:i], authority[i+1:], true
	}
	return authority, "", false
}

// parseHostPort validates an RFC 3986 host with an optional port and
// returns the host in canonical spelling.
func parseHostPort(authority string) (string, int, error) {
	hostPart, portPart, hasPort := splitPort(authority)
	port := 0
	if hasPort {
		if portPart == "" || len(portPart) > 5 {
			return "", 0, uriFormError("the port must be 1 to 65535")
		}
		for i := 0; i < len(portPart); i++ {
			if portPart[i] < '0' || portPart[i] > '9' {
				return "", 0, uriFormError("the port must be decimal digits")
			}
			port = port*10 + int(portPart[i]-'0')
		}
		if port < 1 || port > 65535 {
			return "", 0, uriFormError("the port must be 1 to 65535")
		}
	}
	if hostPart == "" {
		return "", 0, uriFormError("the URI has no host")
	}
	if hostPart[0] == '[' {
		if hostPart[len(hostPart)-1] != ']' {
			return "", 0, uriFormError("unterminated IPv6 literal")
		}
		a, err := netip.ParseAddr(hostPart[1 : len(hostPart)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", 0, uriFormError("invalid IPv6 literal")
		}
		return a.String(), port, nil
	}
	if strings.Trim(hostPart, "0123456789.") == "" {
		a, err := netip.ParseAddr(hostPart)
		if err != nil || !a.Is4() {
			return "", 0, uriFormError("invalid IPv4 address")
		}
		return a.String(), port, nil
	}
	if !isHostname(hostPart) {
		return "", 0, uriFormError("invalid host name " + strconv.Quote(hostPart))
	}
	return strings.ToLower(hostPart), port, nil
}

// isHostname accepts DNS host names: dot-separated labels of letters,
// digits and inner hyphens, 1-63 bytes each, 253 in all. RFC 3986
// reg-name allows more, but nothing else can be dialled.
func isHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !isAlnum(c) && c != '-' {
				return false
			}
		}
	}
	return true
}

// isDomain is the draft's domain production, applied to a valid,
// lower-cased host name: every label starts with a letter.
func isDomain(host string) bool {
	if host == "" || strings.IndexByte(host, ':') >= 0 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || label[0] < 'a' || label[0] > 'z' {
			return false
		}
	}
	return true
}

// agentName returns the {agent-name} of a /agents/{agent-name}[/...]
// path, without a package extension.
func agentName(path string) (string, bool, error) {
	const prefix = "/agents/"
	if !strings.HasPrefix(path, prefix) {
		return "", false, nil
	}
	seg := path[len(prefix):]
	if i := strings.IndexByte(seg, '/'); i >= 0 {
		seg = seg[:i]
	}
	if seg == "" {
		return "", false, nil
	}
	seg, _ = StripPackageExtension(seg)
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !isAlnum(c) && c != '-' && c != '_' {
			return "", false, uriFormError("an agent name is letters, digits, '-' and '_'")
		}
	}
	return seg, true, nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
