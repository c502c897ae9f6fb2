// Package client is a Go client for AGTP/1.0 (Agent Transfer Protocol)
// servers: the library agents import, and what the `agtp` command-line
// tool is built on. Messages, status codes and URIs are package agtp's;
// this package moves them over connections.
//
// # Sending requests
//
// Make one Client and share it:
//
//	c, err := client.New(client.Options{
//		CAFile:  ".state/ca.pem",            // the suite CA `make run` prints
//		AgentID: "7f3a…e1f8",                // the caller, on every request
//	})
//	defer c.Close()
//	resp, err := c.Send(ctx, "QUERY", "agtp://agtp.acme.tld/agents/booker/orders",
//		[]byte(`{"parameters":{"status":"open"}}`), nil)
//
// Send takes an agtp:// URI; Do takes an *agtp.Request and a host:port.
// A response with any status is a response, not an error: check
// resp.Status (agtp.IsSuccess and friends). Errors are transport
// failures: no connection, a TLS failure, a deadline, a malformed
// response.
//
// Addressing follows core §6.1: the URI's host (and port, 4480 by
// default) is where to connect, and its path and query are the
// request-target. In Form 1a, agtp://{agent-id}@host/path, the agent-id
// names the agent addressed, with host as a hint of where to ask; it is
// not the caller, so it is not sent as Agent-ID
// (docs/decisions.md#D-agent-id-is-the-caller: Agent-ID identifies the
// caller). Send rejects an Identity Document answering a Form 1a URI when
// its agent_id differs from the URI's (ErrAgentMismatch). Form 1, agtp://{agent-id}, has no server to ask
// and gives ErrNoAddress.
//
// # Connections
//
// Over TCP, each address has a pool of up to Options.MaxConnsPerHost TLS
// 1.3 connections (ALPN "agtp"), kept open between requests for
// Options.IdleConnTimeout. A pool with no connection left, no dial in
// progress and no request using it is dropped, so an address used once
// costs nothing afterwards. A connection carries one request at a time,
// or, with Options.MaxPipeline above 1, several, answered in order. The
// context's deadline becomes the connection's deadline; cancelling the
// context abandons the request, and because the stream then holds an
// answer nobody will read, the connection is closed. Any protocol error
// closes the connection too, as does a 400 (a server closes after a
// wire-level 400).
//
// A server may close an idle connection at any time (idle timeout,
// restart). A pooled connection is checked before reuse, and a request
// that still meets a closed connection before any byte of its response
// arrives fails with ErrNoResponse; the client sends it again on another
// connection only if it is idempotent (see Idempotent), because the
// server may have acted on it.
//
// Over QUIC (Options.QUIC), each address has one connection (a dial
// that fails leaves none behind, and a connection that ends is dropped
// when it ends), and each request has its own
// bidirectional stream: the client writes the
// request and closes its side, then reads the response, or series of
// responses, up to the server's FIN. On a resumed connection, QUERY and
// DISCOVER may be sent in 0-RTT data (they are the only methods a server
// accepts there, agtp.AllowedIn0RTT); every other method waits for the
// handshake. A request the server refused in 0-RTT (rejected early data,
// or 425 Too Early) is sent again after the handshake.
//
// # Streamed responses
//
// A streamed method answers with a series of complete responses, all but
// the last marked X-AGTP-Stream: continue (see agtp.Stream). Client.Stream
// returns them one at a time as they arrive. Client.Do reads a series to
// its end and returns the last response.
//
// # Attribution
//
// Every response of an AGTP server carries an Attribution-Record, a JWS
// signed by the server, and an Audit-ID, its SHA-256.
// VerifyAttribution checks both (EdDSA only; alg none is refused unless
// allowed) against keys from FetchJWKS, using the same
// auditsvc/attribution package the server signs with.
//
// # Debugging
//
// WithTrace attaches a Trace to a context: the connection used, and the
// raw bytes sent and received, which is what `agtp -v` prints.
package client
