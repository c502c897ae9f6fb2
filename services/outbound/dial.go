package outbound

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// nonPublic are the address ranges besides those netip classifies
// (loopback, private, link-local, multicast, unspecified) that no
// caller-named destination may reach: they are internal, reserved, or
// embed an IPv4 address that may be any of those.
var nonPublic = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a 'this network' address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

// NonPublic says what kind of non-public address ip is, or "" for a
// public one. IPv4-mapped IPv6 addresses are judged as the IPv4 address
// they carry.
func NonPublic(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "an invalid address"
	case ip.IsUnspecified():
		return "an unspecified address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsMulticast():
		return "a multicast address"
	case ip.IsPrivate():
		return "a private address"
	}
	for _, r := range nonPublic {
		if r.prefix.Contains(ip) {
			return r.class
		}
	}
	return ""
}

// mayBePrivate reports whether host:port may reach non-public addresses:
// with AllowPrivate, or when the operator named the host exactly.
func (p *Policy) mayBePrivate(host, port string) bool {
	return p != nil && (p.allowPrivate || p.isExplicit(host, port))
}

// CheckAddress refuses hostport ("host:port") when its host is written
// as a non-public address (an IP literal, or localhost) that it may not
// be. Names are checked on what they resolve to when dialled
// (DialContext); this check costs no lookup, so it can run before a
// request is stored.
func (p *Policy) CheckAddress(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return refuse(hostport, "not a host:port")
	}
	if p.mayBePrivate(host, port) {
		return nil
	}
	h := normHost(host)
	if ip, err := netip.ParseAddr(h); err == nil {
		if class := NonPublic(ip); class != "" {
			return refuse(hostport, "it is "+class+"; only a host the operator lists exactly may be")
		}
		return nil
	}
	// RFC 6761: localhost and names below it are loopback wherever they
	// are resolved.
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return refuse(hostport, "it is a loopback name; only a host the operator lists exactly may be")
	}
	return nil
}

// DialContext dials addr ("host:port") for a destination a caller named:
// unless the host may be private (CheckAddress), every address the name
// resolves to is checked by the dialer's Control function as it is
// connected to, so a name that resolves differently now than when it
// was checked still reaches no internal address. It fits
// http.Transport.DialContext and the AGTP client's DialContext.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if p != nil {
		d = p.dialer
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, refuse(addr, "not a host:port")
	}
	if !p.mayBePrivate(host, port) {
		d.Control = Control
	}
	return d.DialContext(ctx, network, addr)
}

// Control is a net.Dialer Control function that refuses to connect to a
// non-public address. It sees the resolved address of each attempt.
func Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refuse(address, "the dialled address is not an IP address and port")
	}
	if class := NonPublic(ap.Addr()); class != "" {
		return refuse(address, "it resolves to "+class)
	}
	return nil
}
