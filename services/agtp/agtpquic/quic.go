// Package agtpquic holds the quic-go side of the AGTP QUIC binding, kept
// apart from package agtp so that programs speaking only TCP/TLS do not
// link quic-go.
//
// The mapping (docs/decisions.md#D-quic-streams): ALPN "agtp"; one
// client-initiated bidirectional stream per request; the response, or
// the series of responses of a streamed method, comes back on the same
// stream, followed by FIN. The messages on a stream are framed exactly
// as on TCP, so agtp.ReadRequest and (*agtp.Response).Write work on a
// bufio wrapper of the stream.
//
// A server listens with quic.ListenAddrEarly(addr,
// agtp.ServerTLSConfig(cert), agtpquic.Config()) and, for each request
// read, calls RefuseEarly before serving it.
package agtpquic

import (
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/quic-go/quic-go"
)

// HandshakeTimeout bounds the QUIC handshake, so that half-open
// connections cannot pile up.
const HandshakeTimeout = 10 * time.Second

// Config returns the quic-go configuration of an AGTP endpoint: bounded
// concurrent request streams, no unidirectional streams (AGTP does not
// use them), the AGTP idle timeout, 0-RTT allowed so that QUERY and
// DISCOVER can be answered from early data (see RefuseEarly), and
// receive windows sized for AGTP's messages.
func Config() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:  HandshakeTimeout,
		MaxIdleTimeout:        agtp.DefaultIdleTimeout,
		MaxIncomingStreams:    agtp.DefaultMaxStreams,
		MaxIncomingUniStreams: -1,
		Allow0RTT:             true,
		// What a peer may send before it is read is held in memory, per
		// connection, outside any body budget: quic-go's defaults start
		// at 512 KiB a stream and 768 KiB a connection. A request head
		// is a few KiB; the windows grow, up to the maxima, only as
		// fast as the receiver reads.
		InitialStreamReceiveWindow:     InitialStreamWindow,
		MaxStreamReceiveWindow:         MaxStreamWindow,
		InitialConnectionReceiveWindow: InitialConnectionWindow,
		MaxConnectionReceiveWindow:     MaxConnectionWindow,
	}
}

// The receive windows of Config.
const (
	InitialStreamWindow     = 64 << 10
	MaxStreamWindow         = 2 << 20
	InitialConnectionWindow = 128 << 10
	MaxConnectionWindow     = 8 << 20
)

// HandshakeComplete reports, without blocking, whether conn's handshake
// has completed. Until it has, request bytes may have come in 0-RTT data,
// which an attacker can replay.
func HandshakeComplete(conn *quic.Conn) bool {
	select {
	case <-conn.HandshakeComplete():
		return true
	default:
		return false
	}
}

// RefuseEarly reports whether a request with method, read from conn,
// must be refused with agtp.TooEarly(method) (425 too-early): the
// handshake is not yet complete and the method is not allowed in 0-RTT
// data (agtp.AllowedIn0RTT). Checking when the request has been read is
// enough: a replayed flight never completes the handshake, so a replay
// is always caught.
func RefuseEarly(conn *quic.Conn, method string) bool {
	return !agtp.AllowedIn0RTT(method) && !HandshakeComplete(conn)
}

// QUIC application error codes of AGTP. The drafts define none
// (docs/decisions.md#D-quic-streams); these are the project's, shared by
// the front door and the client.
const (
	// CodeNoError closes a connection normally (idle timeout, drain
	// complete).
	CodeNoError quic.ApplicationErrorCode = 0x0
	// CodeShutdown closes the connections left when a server's drain runs
	// out of time.
	CodeShutdown quic.ApplicationErrorCode = 0x1
	// CodeConnectionLimit closes a connection whose source turned out,
	// once its handshake proved the address, to hold as many connections
	// as the server allows one source.
	CodeConnectionLimit quic.ApplicationErrorCode = 0x2
	// StreamNoError stops reading the rest of a served stream.
	StreamNoError quic.StreamErrorCode = 0x0
	// StreamAbandoned resets a stream whose request never completed: the
	// server got no complete request, or the client gave up on it.
	StreamAbandoned quic.StreamErrorCode = 0x1
)
