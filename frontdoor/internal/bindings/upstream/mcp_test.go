package upstream_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
)

// mcpServer is a small MCP server over the Streamable HTTP transport:
// initialize assigns a session, notifications/initialized is accepted with
// 202, and tools/call echoes its arguments as JSON or as an event stream.
type mcpServer struct {
	mu       sync.Mutex
	sessions map[string]bool
	inits    int
	sse      bool
	methods  []string
	versions []string
	keys     []string // the Idempotency-Key of each message, in order
}

func (m *mcpServer) forget() {
	m.mu.Lock()
	m.sessions = map[string]bool{}
	m.mu.Unlock()
}

func (m *mcpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg upstream.RPCMessage
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil || r.Method != http.MethodPost {
		http.Error(w, "bad", 400)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.methods = append(m.methods, msg.Method)
	m.keys = append(m.keys, r.Header.Get("Idempotency-Key"))
	if msg.Method == "initialize" {
		m.inits++
		id := fmt.Sprintf("sess-%d", m.inits)
		if m.sessions == nil {
			m.sessions = map[string]bool{}
		}
		m.sessions[id] = true
		w.Header().Set("Mcp-Session-Id", id)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"1"}}}`, msg.ID)
		return
	}
	if !m.sessions[r.Header.Get("Mcp-Session-Id")] {
		http.Error(w, "unknown session", http.StatusNotFound)
		return
	}
	m.versions = append(m.versions, r.Header.Get("MCP-Protocol-Version"))
	switch msg.Method {
	case "notifications/initialized":
		w.WriteHeader(http.StatusAccepted)
	case "tools/call":
		var p struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		args, _ := json.Marshal(p.Arguments)
		reply := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}],"structuredContent":%s,"isError":false}}`, msg.ID, p.Name, args)
		if m.sse {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
			_, _ = io.WriteString(w, "event: message\ndata: "+reply+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, msg.ID)
	}
}

// A carried tools/call reaches the MCP server bound as an external
// service: the session is opened once and reused, reopened when the
// server forgets it, answers come as JSON or as an event stream, and the
// caller's JSON-RPC id is kept.
func TestCallMCP(t *testing.T) {
	mcp := &mcpServer{}
	srv := startUpstream(t, mcp)
	e := newExecutor(t, nil)
	def := binding{url: srv.URL + "/mcp", headers: map[string]string{"Authorization": "Bearer ${TOKEN}"}}.def()
	callTool := func(id string) upstream.RPCMessage {
		t.Helper()
		msg := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"x":1}}}`
		res, err := e.CallMCP(testCtx(t), def, json.RawMessage(msg), "key-"+id)
		if err != nil {
			t.Fatal(err)
		}
		var resp upstream.RPCMessage
		if err := json.Unmarshal(res.Output, &resp); err != nil {
			t.Fatal(err)
		}
		if string(resp.ID) != id || resp.Result == nil {
			t.Fatalf("response %s", res.Output)
		}
		return resp
	}
	r := callTool(`"task-1"`)
	var result struct {
		StructuredContent map[string]any `json:"structuredContent"`
	}
	_ = json.Unmarshal(r.Result, &result)
	if result.StructuredContent["x"] != 1.0 {
		t.Errorf("result %s", r.Result)
	}
	mcp.mu.Lock()
	mcp.sse = true
	mcp.mu.Unlock()
	callTool(`7`)
	mcp.forget()
	callTool(`8`)
	mcp.mu.Lock()
	defer mcp.mu.Unlock()
	want := []string{"initialize", "notifications/initialized", "tools/call", "tools/call", "tools/call", "initialize", "notifications/initialized", "tools/call"}
	if fmt.Sprint(mcp.methods) != fmt.Sprint(want) {
		t.Errorf("server saw %v\nwant %v", mcp.methods, want)
	}
	if mcp.inits != 2 {
		t.Errorf("%d sessions opened, want 2", mcp.inits)
	}
	// The carried request has the request's key; the session's own
	// messages have none.
	wantKeys := []string{"", "", `key-"task-1"`, "key-7", "key-8", "", "", "key-8"}
	if fmt.Sprint(mcp.keys) != fmt.Sprint(wantKeys) {
		t.Errorf("Idempotency-Key per message %q\nwant %q", mcp.keys, wantKeys)
	}
	for _, v := range mcp.versions {
		if v != upstream.MCPProtocolVersion {
			t.Errorf("MCP-Protocol-Version %q", v)
		}
	}
}

// HTTP-level MCP failures are the upstream_* errors.
func TestCallMCPUpstreamFailure(t *testing.T) {
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(401) }))
	e := newExecutor(t, nil)
	_, err := e.CallMCP(testCtx(t), binding{url: srv.URL}.def(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`), "")
	if errName(t, err) != upstream.ErrAuthentication {
		t.Fatalf("%v", err)
	}
}
