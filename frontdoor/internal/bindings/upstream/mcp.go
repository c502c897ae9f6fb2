package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/agtpsuite/agtp/services/textcut"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/propagation"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
)

// MCP servers bound as external services. An EXECUTE endpoint whose
// binding is external_service with method POST and the URL of an MCP
// server's Streamable HTTP endpoint takes carried MCP messages (core §8):
// CallMCP sends the JSON-RPC message there and returns the JSON-RPC
// response as the endpoint's output. The session (initialize, then
// notifications/initialized, then Mcp-Session-Id on every message) is
// opened lazily per upstream and reopened once when the server forgets it
// (404). Answers may be JSON or a server-sent event stream.

// MCPProtocolVersion is the protocol version the front door asks for.
const MCPProtocolVersion = "2025-06-18"

// RPCMessage is a JSON-RPC 2.0 message.
type RPCMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

type mcpSession struct {
	mu      sync.Mutex
	ready   bool
	id      string // Mcp-Session-Id, when the server assigns one
	version string
	next    int64
}

func (s *mcpSession) state() (id, version string, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.version, s.ready
}

func (s *mcpSession) reset() {
	s.mu.Lock()
	s.ready, s.id, s.version = false, "", ""
	s.mu.Unlock()
}

func (s *mcpSession) nextID() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return json.RawMessage(strconv.FormatInt(s.next, 10))
}

func (e *Executor) mcpSession(b *binding) *mcpSession {
	key := b.rawURL + "\x00" + fmt.Sprint(b.header)
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sessions[key]
	if s == nil {
		s = &mcpSession{}
		e.sessions[key] = s
	}
	return s
}

// CallMCP forwards one JSON-RPC request to the MCP server an
// external_service binding names, and returns the server's JSON-RPC
// response (with the caller's id) as the output. HTTP-level failures are
// the upstream_* errors; a JSON-RPC error is a response like any other.
// idemKey, the request's Idempotency-Key, goes with the forwarded request
// in the binding's idempotency header, as for any external service.
func (e *Executor) CallMCP(ctx context.Context, def *endpoint.Definition, msg json.RawMessage, idemKey string) (*handler.Result, error) {
	b, err := e.compile(def)
	if err != nil {
		return nil, err
	}
	if b.grpc || b.method != http.MethodPost {
		return nil, fmt.Errorf("%w: %s: an MCP server is reached with method POST over HTTPS", ErrBinding, b.endpoint)
	}
	var req RPCMessage
	if err := json.Unmarshal(msg, &req); err != nil || req.Method == "" || len(req.ID) == 0 {
		return nil, fmt.Errorf("carried MCP message is not a JSON-RPC request")
	}
	callerID := req.ID
	sess := e.mcpSession(b)
	for try := 0; ; try++ {
		if a, err := e.mcpOpen(ctx, b, sess); err != nil || a != nil {
			if err != nil {
				return nil, err
			}
			return e.result(ctx, b, *a)
		}
		req.ID = sess.nextID()
		a, err := e.mcpPost(ctx, b, sess, req, true, idemKey)
		if err != nil {
			return nil, err
		}
		if a.status == http.StatusNotFound && try == 0 {
			if id, _, _ := sess.state(); id != "" {
				// The server forgot the session; open a new one once.
				sess.reset()
				continue
			}
		}
		if a.fail != failNone || a.status < 200 || a.status > 299 {
			return e.result(ctx, b, a)
		}
		var resp RPCMessage
		if err := json.Unmarshal(a.body, &resp); err != nil {
			return e.result(ctx, b, attempt{fail: failMalformed, err: err})
		}
		resp.ID = callerID
		out, err := json.Marshal(resp)
		if err != nil {
			return nil, fmt.Errorf("MCP response: %w", err)
		}
		return &handler.Result{Output: out}, nil
	}
}

// mcpOpen runs the initialize handshake when the session is not open. A
// non-nil attempt is a failure to answer with.
func (e *Executor) mcpOpen(ctx context.Context, b *binding, sess *mcpSession) (*attempt, error) {
	if _, _, ready := sess.state(); ready {
		return nil, nil
	}
	init := RPCMessage{JSONRPC: "2.0", ID: sess.nextID(), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"` + MCPProtocolVersion + `","capabilities":{},"clientInfo":{"name":"agtp-frontdoor","version":"1"}}`)}
	a, err := e.mcpPost(ctx, b, sess, init, true, "")
	if err != nil {
		return nil, err
	}
	if a.fail != failNone || a.status < 200 || a.status > 299 {
		return &a, nil
	}
	var resp struct {
		Result *struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if err := json.Unmarshal(a.body, &resp); err != nil || resp.Result == nil {
		return &attempt{fail: failMalformed, err: fmt.Errorf("MCP initialize: no result: %s", textcut.Mark(strings.ToValidUTF8(string(a.body), "?"), 200))}, nil
	}
	sess.mu.Lock()
	sess.id = a.header.Get("Mcp-Session-Id")
	sess.version = resp.Result.ProtocolVersion
	sess.mu.Unlock()
	note := RPCMessage{JSONRPC: "2.0", Method: "notifications/initialized"}
	n, err := e.mcpPost(ctx, b, sess, note, false, "")
	if err != nil {
		return nil, err
	}
	if n.fail != failNone || n.status < 200 || n.status > 299 {
		return &n, nil
	}
	sess.mu.Lock()
	sess.ready = true
	sess.mu.Unlock()
	return nil, nil
}

// mcpPost sends one message, with idemKey in the idempotency header when
// it is not empty. For a request (wantReply), the attempt's body is the
// JSON-RPC response with the request's id, taken from a JSON answer or
// from the event stream.
func (e *Executor) mcpPost(ctx context.Context, b *binding, sess *mcpSession, msg RPCMessage, wantReply bool, idemKey string) (attempt, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return attempt{}, err
	}
	id, version, _ := sess.state()
	return e.run(ctx, b, "upstream MCP "+msg.Method, func(ctx context.Context) attempt {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.rawURL, bytes.NewReader(body))
		if err != nil {
			return attempt{fail: failConnection, permanent: true, err: err}
		}
		for k, vs := range b.header {
			req.Header[k] = vs
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("User-Agent", e.opts.UserAgent)
		if id != "" {
			req.Header.Set("Mcp-Session-Id", id)
		}
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
		if idemKey != "" {
			req.Header.Set(b.idemHeader, idemKey)
		}
		e.opts.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
		resp, err := e.client.Do(req)
		if err != nil {
			return connFailure(ctx, err)
		}
		defer resp.Body.Close()
		a := attempt{status: resp.StatusCode, header: resp.Header}
		if resp.StatusCode < 200 || resp.StatusCode > 299 || !wantReply {
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			return a
		}
		r := io.LimitReader(resp.Body, e.opts.MaxResponseBytes+1)
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if mt == "text/event-stream" {
			a.body, err = readEventReply(r, msg.ID, e.opts.MaxResponseBytes)
		} else {
			a.body, err = io.ReadAll(r)
			if err == nil && int64(len(a.body)) > e.opts.MaxResponseBytes {
				a.fail = failTooLarge
			}
		}
		// After a 2xx the server has acted: a body or event stream that
		// breaks off or stalls is an answer that cannot be read, not a
		// timeout a retry may cure (as in do, http.go).
		switch {
		case err == errTooLarge:
			a.fail = failTooLarge
		case err != nil:
			a.fail, a.err = failMalformed, err
		}
		return a
	})
}

var errTooLarge = fmt.Errorf("event stream exceeds the size limit")

// readEventReply reads a server-sent event stream until the JSON-RPC
// response to id arrives (server requests and notifications on the stream
// are skipped: the front door has nothing to answer them with).
func readEventReply(r io.Reader, id json.RawMessage, limit int64) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), int(limit)+1)
	var data bytes.Buffer
	var read int64
	for sc.Scan() {
		line := sc.Bytes()
		read += int64(len(line)) + 1
		if read > limit {
			return nil, errTooLarge
		}
		switch {
		case len(line) == 0:
			if data.Len() > 0 {
				var m RPCMessage
				if json.Unmarshal(data.Bytes(), &m) == nil && bytes.Equal(m.ID, id) && (m.Result != nil || m.Error != nil) {
					return bytes.Clone(data.Bytes()), nil
				}
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(v)
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, errTooLarge
		}
		return nil, err
	}
	if data.Len() > 0 {
		var m RPCMessage
		if json.Unmarshal(data.Bytes(), &m) == nil && bytes.Equal(m.ID, id) {
			return bytes.Clone(data.Bytes()), nil
		}
	}
	return nil, fmt.Errorf("the event stream ended without the response")
}
