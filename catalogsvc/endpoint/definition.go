// Package endpoint parses and validates AGTP-API endpoint definitions
// (draft-hood-agtp-api-01 §6, §7, §12, §13) written in JSON or YAML,
// compiles their JSON Schema 2020-12 input and output schemas, and renders
// the manifest projection (§8.9) and the catalog snapshot's
// catalogv1.Endpoint.
//
// Validation reports every problem it finds, each naming the file, the field
// (with the YAML line when known) and the rule broken. The AGIS authoring
// checks that can run mechanically at load
// (docs/decisions.md#D-agis-authoring: passes 1, 2, 4, 5 and 8) are errors;
// the judgement calls (passes 3 and 6) are warnings.
package endpoint

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Definition is one endpoint definition (AGTP-API §6.2).
type Definition struct {
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Description    string          `json:"description"`
	Namespace      string          `json:"namespace,omitempty"`
	Semantic       Semantic        `json:"semantic"`
	InputSchema    json.RawMessage `json:"input_schema"`
	OutputSchema   json.RawMessage `json:"output_schema"`
	Errors         []string        `json:"errors"`
	Handler        Handler         `json:"handler"`
	RequiredScopes []string        `json:"required_scopes,omitempty"`
	Deprecated     *Deprecation    `json:"deprecated,omitempty"`

	// Project extensions. AGTP-API §8.9 keeps every non-handler field in
	// the manifest projection, so agents see them too.

	// Anonymous lets a caller without Agent-ID invoke the endpoint.
	Anonymous bool `json:"anonymous,omitempty"`
	// IdempotencyKeyRequired makes Idempotency-Key mandatory (it is only
	// recommended for non-idempotent endpoints otherwise, AGTP-API §7.1).
	IdempotencyKeyRequired bool `json:"idempotency_key_required,omitempty"`
	// MaxBodyBytes overrides the front door's body limit
	// (docs/decisions.md#D-limits).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// AGP declares how a stock AGP client's request object reaches the
	// endpoint (docs/agp.md "Adapter requests").
	AGP *AGPMapping `json:"agp,omitempty"`
}

// Semantic is the semantic block (AGTP-API §7.1). The AGIS names
// confidence_guidance and impact_tier are accepted on input and written
// back under the AGTP-API names.
type Semantic struct {
	Intent       string   `json:"intent"`
	Actor        string   `json:"actor"`
	Outcome      string   `json:"outcome"`
	Capability   string   `json:"capability"`
	Confidence   *float64 `json:"confidence"`
	Impact       string   `json:"impact"`
	IsIdempotent *bool    `json:"is_idempotent"`
	// AGIS extensions kept for MCP export and verification
	// (docs/decisions.md#D-agis-authoring).
	ParameterHints  map[string][]string `json:"parameter_hints,omitempty"`
	StateTransition []string            `json:"state_transition,omitempty"`
	MCPToolName     string              `json:"mcp_tool_name,omitempty"`
}

// Handler is the handler binding (AGTP-API §12). Only Type survives the
// manifest projection.
type Handler struct {
	Type string `json:"type"`
	// registered_function
	Function string `json:"function,omitempty"`
	// composition
	Recipe string `json:"recipe,omitempty"`
	// external_service
	URL             string            `json:"url,omitempty"`
	Method          string            `json:"method,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	InputTransform  map[string]string `json:"input_transform,omitempty"`
	OutputTransform map[string]string `json:"output_transform,omitempty"`
	ErrorMap        map[string]string `json:"error_map,omitempty"`
	TimeoutSeconds  *float64          `json:"timeout_seconds,omitempty"`
	// IdempotencyHeader names the upstream header that carries the
	// request's Idempotency-Key, so that an upstream can recognise a retry
	// of a call it already made (project extension; empty means
	// DefaultIdempotencyHeader).
	IdempotencyHeader string `json:"idempotency_header,omitempty"`
}

// DefaultIdempotencyHeader is the upstream header of the Idempotency-Key
// when a binding names none.
const DefaultIdempotencyHeader = "Idempotency-Key"

// UpstreamIdempotencyHeader is the header the binding sends the
// Idempotency-Key in.
func (h *Handler) UpstreamIdempotencyHeader() string {
	if h.IdempotencyHeader != "" {
		return h.IdempotencyHeader
	}
	return DefaultIdempotencyHeader
}

// Handler binding kinds.
const (
	HandlerRegisteredFunction = "registered_function"
	HandlerComposition        = "composition"
	HandlerExternalService    = "external_service"
)

// Deprecation is the endpoint's deprecated block (AGTP-API §6.5).
type Deprecation struct {
	DeprecatedIn string     `json:"deprecated_in"`
	RemovedIn    string     `json:"removed_in,omitempty"`
	Successor    *Successor `json:"successor,omitempty"`
}

// Successor names the replacement endpoint; either part may be absent.
type Successor struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

// Warning renders the AGTP-Endpoint-Warning value (AGTP-API §6.5): the
// successor as "METHOD /path" when both parts are known, else the one
// part; absent parts are left out.
func (d *Deprecation) Warning() string {
	if d == nil {
		return ""
	}
	w := "deprecated"
	if s := d.Successor; s != nil {
		succ := strings.TrimSpace(s.Method + " " + s.Path)
		if succ != "" {
			w += "; successor=" + succ
		}
	}
	if d.RemovedIn != "" {
		w += "; removed_in=" + d.RemovedIn
	}
	return w
}

// Key is the endpoint's identity, "METHOD /path".
func (d *Definition) Key() string { return d.Method + " " + d.Path }

// Upstream failure names an external_service endpoint must declare
// (AGTP-API §12.3), and the composition failure name (§12.1).
var (
	UpstreamErrors   = []string{"upstream_timeout", "upstream_connection_error", "upstream_malformed_response", "upstream_authentication_failed", "upstream_error"}
	CompositionError = "composition_failed"
)

// FieldError is one validation failure: which file, which field (dotted,
// with [i] for array items), which rule, and why.
type FieldError struct {
	File  string `json:"file,omitempty"`
	Line  int    `json:"line,omitempty"`
	Field string `json:"field,omitempty"`
	Rule  string `json:"rule"`
	Msg   string `json:"message"`
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	b.WriteString(" (")
	b.WriteString(e.Rule)
	b.WriteString(")")
	return b.String()
}

// Errors is every failure of one definition or file.
type Errors []*FieldError

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Unwrap exposes the individual failures to errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
