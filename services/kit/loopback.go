package kit

import "net"

// IsLoopbackAddr reports whether a listen address (host:port) names a
// loopback host, so that only processes on this machine can reach it. An
// empty host listens on every interface, so it is not.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
