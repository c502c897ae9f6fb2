package endpoint

import (
	"slices"
	"strings"
)

// MethodScopes are the Authority-Scope tokens a Tier 2 method needs whatever
// its endpoint declares (standard methods §5.4, §5.7, §8.8, §10.1-§10.3).
// Compile puts the method's scope first in the endpoint's required_scopes,
// so the policy check that refuses a missing endpoint scope (262
// scope-required, docs/decisions.md#D-scope-262) refuses it too, and
// DESCRIBE and the manifest show it.
var MethodScopes = map[string]string{
	"AUTHORIZE": "authorization:grant",
	"PURCHASE":  "payments:purchase",
	"RUN":       "activation:run",
}

// FreeFormMembers are input member names that carry a free-form execution
// string. RUN must never accept one (standard methods §8.8, §10.3): a RUN
// endpoint may not declare one anywhere in its input schema, and the front
// door refuses a RUN request carrying one at any depth.
var FreeFormMembers = []string{"command", "script", "shell", "exec", "cmd", "code"}

// IsFreeFormMember reports whether a member name is one of FreeFormMembers
// (case-insensitive).
func IsFreeFormMember(name string) bool {
	return slices.Contains(FreeFormMembers, strings.ToLower(name))
}

// maxSchemaDepth bounds the walk over a RUN input schema's properties.
const maxSchemaDepth = 32

// tier2 applies the suite's rules for the Tier 2 methods whose security
// notes bind every endpoint (standard methods §5.4, §5.6, §8.8, §10).
func (c *checker) tier2(def *Definition, in *compiledSchema) {
	if s, ok := MethodScopes[def.Method]; ok && !slices.Contains(def.RequiredScopes, s) {
		def.RequiredScopes = append([]string{s}, def.RequiredScopes...)
	}
	var props map[string]any
	var required []any
	if in != nil {
		props, _ = in.doc["properties"].(map[string]any)
		required, _ = in.doc["required"].([]any)
	}
	requireMember := func(name, why string) {
		if in == nil {
			return // the schema's own error is reported
		}
		if _, ok := props[name]; !ok || !slices.Contains(required, any(name)) {
			c.fail("input_schema.required", "tier2-member-required", "%s endpoints must declare %q as a required input member (%s)", def.Method, name, why)
		}
	}
	switch def.Method {
	case "AUTHORIZE":
		// The grant is checked against the caller's own scopes before the
		// handler runs; without it there is nothing to check.
		requireMember("scope", "standard methods §5.4, §10.2")
	case "TRANSFER":
		if len(def.RequiredScopes) == 0 {
			c.fail("required_scopes", "tier2-scope-required", "TRANSFER endpoints must declare the scope for the resource type they transfer (standard methods §5.6)")
		}
		// Both parties go into the Attribution-Record (§10.6).
		requireMember("from_principal", "standard methods §5.6, §10.6")
		requireMember("to_principal", "standard methods §5.6, §10.6")
	case "RUN":
		if in == nil {
			return
		}
		if _, ok := in.doc["patternProperties"]; ok {
			c.fail("input_schema.patternProperties", "run-free-form", "a RUN input schema must name its members: patternProperties would admit a free-form execution string (standard methods §8.8)")
		}
		c.freeFormMembers("input_schema", in.doc, 0)
	}
}

// freeFormMembers refuses any property of schema (at any depth) named like
// a free-form execution string.
func (c *checker) freeFormMembers(field string, schema map[string]any, depth int) {
	if depth > maxSchemaDepth {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := field + ".properties." + name
		if IsFreeFormMember(name) {
			c.fail(f, "run-free-form", "RUN must not accept free-form execution strings; a procedure's inputs are named parameters (standard methods §8.8, §10.3)")
		}
		if sub, ok := props[name].(map[string]any); ok {
			c.freeFormMembers(f, sub, depth+1)
		}
	}
	if items, ok := schema["items"].(map[string]any); ok {
		c.freeFormMembers(field+".items", items, depth+1)
	}
	if ap, ok := schema["additionalProperties"].(map[string]any); ok {
		c.freeFormMembers(field+".additionalProperties", ap, depth+1)
	}
}
