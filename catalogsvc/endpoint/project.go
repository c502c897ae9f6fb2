package endpoint

import (
	"bytes"
	"encoding/json"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// Projection is the endpoint as the manifest shows it (AGTP-API §8.9):
// everything except the handler binding's details, which shrink to
// {"type": ...}.
func (e *Endpoint) Projection() map[string]any {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(e.JSON))
	dec.UseNumber()
	_ = dec.Decode(&m) // e.JSON was produced by json.Marshal
	m["handler"] = map[string]any{"type": e.Def.Handler.Type}
	return m
}

// Warning is the AGTP-Endpoint-Warning value, or "" when the endpoint is
// not deprecated.
func (e *Endpoint) Warning() string { return e.Def.Deprecated.Warning() }

// HandlerName is the binding's reference: the function, the recipe or
// the upstream URL.
func (e *Endpoint) HandlerName() string {
	h := e.Def.Handler
	switch h.Type {
	case HandlerRegisteredFunction:
		return h.Function
	case HandlerComposition:
		return h.Recipe
	case HandlerExternalService:
		return h.URL
	}
	return ""
}

// Proto is the snapshot projection (catalogv1.Endpoint); definition (and
// the first release's definition_json) carries the full document, handler
// binding included. It runs once per endpoint per catalog revision.
func (e *Endpoint) Proto(tier catalogv1.EndpointTier) *catalogv1.Endpoint {
	d := e.Def
	// e.JSON was produced by json.Marshal of the definition: an object.
	def, _ := jsondoc.Struct(e.JSON)
	p := &catalogv1.Endpoint{
		Method:                 d.Method,
		Path:                   d.Path,
		Tier:                   tier,
		Description:            d.Description,
		IsIdempotent:           d.Semantic.IsIdempotent != nil && *d.Semantic.IsIdempotent,
		Anonymous:              d.Anonymous,
		RequiredScopes:         d.RequiredScopes,
		Deprecated:             d.Deprecated != nil,
		DeprecationMessage:     e.Warning(),
		MaxBodyBytes:           d.MaxBodyBytes,
		IdempotencyKeyRequired: d.IdempotencyKeyRequired,
		Definition:             def,
		HandlerKind:            d.Handler.Type,
		HandlerName:            e.HandlerName(),
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Definition
	p.DefinitionJson = e.JSON
	return p
}
