// Package carried handles framework payloads carried by EXECUTE (core §8,
// docs/decisions.md#D-carried-dispatch): the request names the framework's
// Content-Type in its payload_type parameter (or as the message
// Content-Type), and the front door dispatches on it after AGTP's own checks
// (identity, Authority-Scope, policy) have passed, so the framework never
// sees a request AGTP refused.
//
// MCP is supported: a JSON-RPC tools/call (or tools/list, ping) reaches
// either an MCP server bound as an external_service (forwarded by package
// upstream) or this server's own endpoints listed as MCP tools (Gateway).
// A2A, ACP and every other payload type are answered 422
// payload-type-unsupported.
package carried

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agtpsuite/agtp/services/textcut"
	"mime"
	"strings"

	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Media types and names.
const (
	// MediaTypeMCPTools is MCP's tool-call payload type (core §8.4).
	MediaTypeMCPTools = "application/vnd.mcp.tools+json"
	// MediaTypeA2A and MediaTypeACP are recognised only to be refused
	// with a precise answer.
	MediaTypeA2A = "application/vnd.a2a+json"
	MediaTypeACP = "application/vnd.acp+json"
	// GatewayFunction is the registered_function name that binds an
	// EXECUTE endpoint to the local MCP tool gateway: this server's
	// endpoints listed and called as MCP tools.
	GatewayFunction = "agtp.mcp.tools"
	// ReasonUnsupported answers a payload type the front door does not
	// dispatch (422).
	ReasonUnsupported = "payload-type-unsupported"
	// ReasonMCPMethod answers an MCP method EXECUTE does not carry (422).
	ReasonMCPMethod = "mcp-method-unsupported"
	// ReasonPayloadInvalid answers a carried payload that is not a
	// JSON-RPC request (422).
	ReasonPayloadInvalid = "payload-invalid"
)

// Kind is the carried framework of a request.
type Kind int

// Kinds.
const (
	None Kind = iota
	MCP
	Unsupported
)

// Detect finds the carried framework of an EXECUTE request from its
// validated input and message Content-Type
// (docs/decisions.md#D-carried-dispatch: dispatch on payload_type if
// present, otherwise on the Content-Type; a bare JSON-RPC body is
// recognised by its method). It returns the payload type it
// dispatched on.
func Detect(contentType string, input map[string]any) (Kind, string) {
	if pt, ok := input["payload_type"].(string); ok && pt != "" {
		return classify(pt), pt
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	mt = strings.ToLower(mt)
	switch mt {
	case "", agtp.MediaTypeJSON, "application/json":
	default:
		return classify(mt), mt
	}
	if v, _ := input["jsonrpc"].(string); v == "2.0" {
		m, _ := input["method"].(string)
		switch {
		case strings.HasPrefix(m, "message/") || strings.HasPrefix(m, "tasks/"):
			return Unsupported, MediaTypeA2A
		case isMCPMethod(m):
			return MCP, MediaTypeMCPTools
		}
		return Unsupported, "application/json-rpc"
	}
	return None, ""
}

func classify(mediaType string) Kind {
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		return Unsupported
	}
	if strings.HasPrefix(strings.ToLower(mt), "application/vnd.mcp") {
		return MCP
	}
	return Unsupported
}

func isMCPMethod(m string) bool {
	switch m {
	case "initialize", "ping":
		return true
	}
	for _, p := range []string{"tools/", "resources/", "prompts/", "notifications/", "completion/", "logging/", "sampling/", "elicitation/", "roots/"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// Forwardable are the MCP methods EXECUTE carries to an MCP server; the
// session handshake is the front door's own business, and resource reads
// map to QUERY, not EXECUTE (core §8.4).
var Forwardable = map[string]bool{"tools/list": true, "tools/call": true, "ping": true}

// ErrNotRequest is a carried payload that is not a JSON-RPC request.
var ErrNotRequest = errors.New("the carried payload is not a JSON-RPC 2.0 request with an id")

// MCPMessage builds the JSON-RPC request an EXECUTE carries. The input is
// either the JSON-RPC message itself (sent with the MCP Content-Type) or
// EXECUTE's parameters: action (the MCP method) and payload (the
// JSON-RPC message, or only its params). A missing id becomes defaultID
// (the Task-ID, say); ids are strings or numbers.
// mismatch names a disagreement between action and the message's method
// (the message's method is used; the caller should log it).
func MCPMessage(input map[string]any, defaultID string) (msg upstream.RPCMessage, mismatch string, err error) {
	src := input
	action, _ := input["action"].(string)
	if _, isRPC := input["jsonrpc"]; !isRPC {
		switch p := input["payload"].(type) {
		case map[string]any:
			if _, isRPC := p["jsonrpc"]; isRPC {
				src = p
			} else {
				src = map[string]any{"jsonrpc": "2.0", "method": action, "params": p}
			}
		case nil:
			src = map[string]any{"jsonrpc": "2.0", "method": action}
		default:
			return msg, "", fmt.Errorf("payload must be a JSON object")
		}
	}
	raw, err := json.Marshal(src)
	if err != nil {
		return msg, "", err
	}
	if err := json.Unmarshal(raw, &msg); err != nil || msg.JSONRPC != "2.0" || msg.Method == "" {
		return msg, "", ErrNotRequest
	}
	if len(msg.ID) == 0 || string(msg.ID) == "null" {
		// A message without an id still gets an answer: the AGTP response
		// carries it.
		msg.ID, _ = json.Marshal(defaultID)
	}
	if id := msg.ID[0]; id != '"' && (id < '0' || id > '9') && id != '-' {
		return msg, "", ErrNotRequest
	}
	if action != "" && action != msg.Method {
		mismatch = fmt.Sprintf("action %q, carried method %q", textcut.Mark(action, maxLoggedValue), textcut.Mark(msg.Method, maxLoggedValue))
	}
	return msg, mismatch, nil
}

// maxLoggedValue bounds each value a disagreement quotes: they are
// logged, and a body's member can be as large as the body.
const maxLoggedValue = 256

// Disagreements lists the identity and routing fields of a carried
// request body that contradict the AGTP headers (core §8.3: the headers
// win; a mismatch SHOULD be logged). body is the request body decoded;
// header reads a request header.
func Disagreements(body map[string]any, header func(string) string) []string {
	var out []string
	check := func(where string, obj map[string]any) {
		for member, name := range map[string]string{
			"task_id": agtp.HeaderTaskID, "session_id": agtp.HeaderSessionID, "agent_id": agtp.HeaderAgentID,
		} {
			v, ok := obj[member].(string)
			if !ok || v == "" {
				continue
			}
			if h := header(name); h != "" && h != v {
				out = append(out, fmt.Sprintf("%s%s=%q but %s: %q", where, member, textcut.Mark(v, maxLoggedValue), name, textcut.Mark(h, maxLoggedValue)))
			}
		}
	}
	check("", body)
	params, _ := body["parameters"].(map[string]any)
	if params == nil {
		params = body
	}
	if p, ok := params["payload"].(map[string]any); ok {
		check("payload.", p)
		if pp, ok := p["params"].(map[string]any); ok {
			if meta, ok := pp["_meta"].(map[string]any); ok {
				check("payload.params._meta.", meta)
			}
		}
	}
	return out
}
