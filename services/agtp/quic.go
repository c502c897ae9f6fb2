package agtp

import "time"

// Transport defaults shared by the TCP and QUIC servers.
const (
	// DefaultIdleTimeout closes a connection with no request in flight
	// (core §5.4 recommends at least 60 s).
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxStreams bounds concurrent requests on one QUIC
	// connection.
	DefaultMaxStreams = 100
)

// AllowedIn0RTT reports whether a request with this method may be served
// from QUIC 0-RTT (early) data. The rest of the QUIC mapping is in the
// package overview and in package agtpquic. Early data can be replayed by an
// attacker, so only the read-only, idempotent QUERY and DISCOVER are
// served from it (docs/decisions.md#D-zero-rtt); any other method arriving
// before the handshake completes gets [TooEarly].
func AllowedIn0RTT(method string) bool {
	return method == MethodQuery || method == MethodDiscover
}

// TooEarly is the error a server answers a request refused in 0-RTT data
// with: 425 too-early. The client retries after the handshake completes.
func TooEarly(method string) *ProtocolError {
	return &ProtocolError{
		Status:      StatusTooEarly,
		Reason:      ReasonTooEarly,
		Explanation: method + " is not accepted in 0-RTT data; retry after the handshake",
	}
}
