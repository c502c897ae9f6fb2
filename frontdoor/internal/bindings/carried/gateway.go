package carried

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Tool is an MCP tool description (MCP tools/list).
type Tool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
	Meta         map[string]any   `json:"_meta,omitempty"`
}

// ToolAnnotations are MCP's behaviour hints, from the semantic block.
type ToolAnnotations struct {
	ReadOnlyHint    bool `json:"readOnlyHint"`
	DestructiveHint bool `json:"destructiveHint"`
	IdempotentHint  bool `json:"idempotentHint"`
	OpenWorldHint   bool `json:"openWorldHint"`
}

// Gateway is the local MCP tool server: this server's endpoints as MCP
// tools, for an EXECUTE endpoint bound to GatewayFunction. A tool call is
// an invocation of the endpoint through the pipeline (scopes, schemas,
// policy, an Attribution-Record of its own), made under the caller's
// identity; the caller's authority over the tool's endpoint is checked
// before the call is handed over.
type Gateway struct {
	// Endpoints are the catalog snapshot's compiled endpoints.
	Endpoints []*endpoint.Endpoint
	// Invoker runs and pre-checks endpoints for the caller.
	Invoker bindings.Invoker
	// Skip leaves endpoints out of the tool list (built-ins).
	Skip func(*endpoint.Endpoint) bool
	// ServerName is the MCP serverInfo name.
	ServerName string
}

var toolCharsRe = regexp.MustCompile(`[^a-z0-9]+`)

// ToolName is an endpoint's MCP tool name by AGIS App. C.2:
// semantic.mcp_tool_name when declared, otherwise the lowercased method
// and first path segment (BOOK /reservation is book_reservation). The tool
// list falls back to the whole path where that name is not unique.
func ToolName(def *endpoint.Definition) string {
	if def.Semantic.MCPToolName != "" {
		return def.Semantic.MCPToolName
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(def.Path, "/"), "/")
	return toolName(def.Method + "_" + first)
}

// fullToolName names an endpoint by its method and every path segment
// (QUERY /orders/{order_id} is query_orders_order_id), for endpoints
// whose first segment is shared: QUERY /orders and QUERY /orders/{id}
// cannot both be query_orders, and dropping one would hide it.
func fullToolName(def *endpoint.Definition) string {
	return toolName(def.Method + "_" + def.Path)
}

func toolName(s string) string {
	s = strings.Trim(toolCharsRe.ReplaceAllString(strings.ToLower(s), "_"), "_")
	if len(s) > 64 {
		s = strings.TrimRight(s[:64], "_")
	}
	return s
}

// listed is the tool list with each tool's endpoint.
func (g *Gateway) listed() ([]Tool, map[string]*endpoint.Endpoint) {
	eps := make([]*endpoint.Endpoint, 0, len(g.Endpoints))
	for _, ep := range g.Endpoints {
		if ep == nil || ep.Def == nil || (g.Skip != nil && g.Skip(ep)) {
			continue
		}
		if h := ep.Def.Handler; h.Type == endpoint.HandlerRegisteredFunction && h.Function == GatewayFunction {
			continue
		}
		eps = append(eps, ep)
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Def.Key() < eps[j].Def.Key() })
	names := make([]string, len(eps))
	uses := make(map[string]int, len(eps))
	for i, ep := range eps {
		names[i] = ToolName(ep.Def)
		uses[names[i]]++
	}
	for i, ep := range eps {
		if uses[names[i]] > 1 && ep.Def.Semantic.MCPToolName == "" {
			names[i] = fullToolName(ep.Def)
		}
	}
	tools := make([]Tool, 0, len(eps))
	byName := make(map[string]*endpoint.Endpoint, len(eps))
	for i, ep := range eps {
		name := names[i]
		// A declared name that is not unique, or a full name equal to
		// one declared: the first endpoint in METHOD path order keeps it.
		if _, dup := byName[name]; dup || name == "" {
			continue
		}
		byName[name] = ep
		tools = append(tools, describe(name, ep.Def))
	}
	return tools, byName
}

func describe(name string, def *endpoint.Definition) Tool {
	s := def.Semantic
	t := Tool{
		Name:        name,
		Title:       def.Method + " " + def.Path,
		Description: strings.TrimSpace(def.Description + " " + s.Intent),
		InputSchema: def.InputSchema,
		Annotations: &ToolAnnotations{
			ReadOnlyHint:    s.Impact == "informational",
			DestructiveHint: s.Impact == "irreversible",
			IdempotentHint:  s.IsIdempotent != nil && *s.IsIdempotent,
			OpenWorldHint:   def.Handler.Type == endpoint.HandlerExternalService,
		},
		Meta: map[string]any{"agtp/method": def.Method, "agtp/path": def.Path},
	}
	if len(t.InputSchema) == 0 {
		t.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	// MCP requires an output schema to describe an object.
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(def.OutputSchema, &probe) == nil && probe.Type == "object" {
		t.OutputSchema = def.OutputSchema
	}
	if len(def.RequiredScopes) > 0 {
		t.Meta["agtp/required_scopes"] = def.RequiredScopes
	}
	return t
}

// Tools lists the tools the caller may call.
func (g *Gateway) Tools() []Tool {
	all, byName := g.listed()
	out := all[:0]
	for _, t := range all {
		ep := byName[t.Name]
		if g.Invoker.Check(ep.Def.Method, ep.Def.Path) == nil {
			out = append(out, t)
		}
	}
	return out
}

// JSON-RPC error codes.
const (
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
)

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Serve answers one MCP request. AGTP-level refusals (the caller's
// authority does not cover the tool's endpoint) are a *handler.Error with
// the AGTP status, not a JSON-RPC answer: authority is AGTP's.
func (g *Gateway) Serve(ctx context.Context, req upstream.RPCMessage) (upstream.RPCMessage, error) {
	resp := upstream.RPCMessage{JSONRPC: "2.0", ID: req.ID}
	ok := func(v any) (upstream.RPCMessage, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return resp, err
		}
		resp.Result = b
		return resp, nil
	}
	fail := func(code int, msg string) (upstream.RPCMessage, error) {
		resp.Error, _ = json.Marshal(rpcError{Code: code, Message: msg})
		return resp, nil
	}
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if p.ProtocolVersion == "" {
			p.ProtocolVersion = upstream.MCPProtocolVersion
		}
		return ok(map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": g.ServerName, "version": "1"},
		})
	case "ping":
		return ok(map[string]any{})
	case "tools/list":
		return ok(map[string]any{"tools": g.Tools()})
	case "tools/call":
		var p struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Name == "" {
			return fail(codeInvalidParams, "tools/call needs params.name")
		}
		_, byName := g.listed()
		ep := byName[p.Name]
		if ep == nil {
			return fail(codeInvalidParams, "Unknown tool: "+p.Name)
		}
		def := ep.Def
		if o := g.Invoker.Check(def.Method, def.Path); o != nil {
			return resp, &handler.Error{Name: o.Reason, Status: o.Status, Message: fmt.Sprintf("tool %s (%s %s): %s", p.Name, def.Method, def.Path, o.Explanation)}
		}
		if p.Arguments == nil {
			p.Arguments = map[string]any{}
		}
		path, err := recipe.FillPath(def.Path, p.Arguments)
		if err != nil {
			return fail(codeInvalidParams, err.Error())
		}
		args, err := json.Marshal(p.Arguments)
		if err != nil {
			return fail(codeInvalidParams, err.Error())
		}
		o, err := g.Invoker.Invoke(ctx, bindings.Invocation{Method: def.Method, Path: path, Input: args, Key: "mcp:" + p.Name})
		if err != nil {
			return resp, err
		}
		return ok(toolResult(o))
	}
	return fail(codeMethodNotFound, "Method not found: "+req.Method)
}

// toolResult is the MCP CallToolResult of an invocation: the output as
// text and as structured content, or isError with the AGTP status and
// reason.
func toolResult(o *bindings.Outcome) map[string]any {
	if o.OK() {
		out := o.Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		res := map[string]any{"content": []any{map[string]any{"type": "text", "text": string(out)}}, "isError": false}
		if t := bytes.TrimSpace(out); len(t) > 0 && t[0] == '{' {
			res["structuredContent"] = out
		}
		return res
	}
	text := fmt.Sprintf("%d %s", o.Status, agtp.StatusText(o.Status))
	if o.Reason != "" {
		text += " (" + o.Reason + ")"
	}
	if o.Explanation != "" {
		text += ": " + o.Explanation
	}
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": true,
		"_meta": map[string]any{"agtp/status": o.Status, "agtp/reason": o.Reason}}
}
