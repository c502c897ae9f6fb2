// Package agtp reads and writes AGTP/1.0 (Agent Transfer Protocol)
// messages, and parses the protocol's small grammars: agtp:// URIs,
// Authority-Scope and Budget-Limit values. Servers and agents share it,
// so both sides put the same bytes on the wire.
//
// The source of truth is the core draft (draft-hood-independent-agtp,
// text of -08), with the readings docs/decisions.md records where the
// drafts are silent or disagree; section numbers below (§) are the core
// draft's.
//
// # Messages
//
// A request is a request line, header fields, an empty line and a body:
//
//	AGTP/1.0 QUERY /documents?lang=en
//	Agent-ID: 7f3a…e1f8
//	Content-Type: application/vnd.agtp+json
//	Content-Length: 29
//
//	{"parameters":{"intent":"x"}}
//
// The version comes first and the method second (the reverse of HTTP).
// A response starts with "AGTP/1.0 200 OK". Header fields use HTTP/1.1
// syntax with case-insensitive names; see [Header].
//
// [ReadRequest] and [ReadResponse] parse one message from a
// bufio.Reader; [Request.Write] and [Response.Write] serialise one.
// Call them in a loop for a persistent connection: requests are answered
// in order and may be pipelined.
//
// # Framing
//
// Content-Length is the only end-of-message signal (§5.4.1). A message
// without it has no body; Transfer-Encoding is refused; a request with
// Content-Type but no Content-Length is refused with 400
// content-length-required, because its body could not be delimited. The
// writer always sends Content-Length, 0 for no body. Line endings are
// written as CRLF and accepted as CRLF or bare LF.
//
// There is no chunked coding: a streamed method answers with several
// complete responses, all but the last marked "X-AGTP-Stream: continue";
// see [Stream].
//
// # Errors
//
// A message that breaks a wire rule gives a [*ProtocolError]: the status
// and reason token to answer with, and whether the connection must close
// because the stream is no longer framed. Its Response method builds the
// answer with the standard [ErrorBody]. Limits on the request line,
// header section, field count and body size are set with [Limits]; the
// defaults are 8 KiB, 64 KiB, 100 and 1 MiB.
//
// # Transport
//
// AGTP runs over TLS 1.3 only, on TCP or QUIC, port 4480 ([DefaultPort]),
// with ALPN "agtp" ([ALPN]). [ServerTLSConfig] and
// [ClientTLSConfig] return matching configurations. On QUIC each request
// has its own bidirectional stream, which carries the response (or a
// series of them) back and is then closed; only QUERY and DISCOVER may
// be served from 0-RTT data ([AllowedIn0RTT]). The quic-go configuration
// is in the agtpquic subpackage.
package agtp
