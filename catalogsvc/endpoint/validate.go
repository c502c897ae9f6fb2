package endpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Context is what a definition is validated against.
type Context struct {
	// Method reports whether an endpoint may declare the method (a catalog
	// verb at the catalog version in use, a floor method or a custom
	// method; never a legacy verb) and returns its catalog categories.
	// nil skips the membership check (for callers that trust the source,
	// such as the front door compiling a snapshot).
	Method func(name string) (categories []string, ok bool)
	// Verbs is the set no literal path segment may equal; nil skips the
	// verb-leak check.
	Verbs route.VerbSet
	// AllowReserved admits DISCOVER on the reserved built-in paths
	// (AGTP-API §5.9): set for the built-ins and for declared overrides.
	AllowReserved func(path string) bool
	// Functions resolves a registered_function name; nil accepts any
	// well-formed dotted name (the binding is resolved where it runs).
	Functions func(name string) bool
	// Recipes resolves a composition recipe name; nil accepts any
	// well-formed name.
	Recipes func(name string) bool
	// LookupEnv resolves ${VAR} placeholders in external_service headers;
	// nil leaves them to the process that makes the upstream call.
	LookupEnv func(name string) (string, bool)
	// InheritCapability fills a missing semantic.capability from the
	// method's first catalog category (AGTP-API §7.1 "by default
	// inherited"). PROPOSE validation leaves it false: every field is
	// required there (§10.6 step 3).
	InheritCapability bool
}

// Source is one definition document before validation.
type Source struct {
	File string
	// Field is the prefix of the document inside its file ("" or
	// "endpoints[2]").
	Field string
	value any
	doc   *document
}

// Parse decodes a file holding one definition object, or an object whose
// only member "endpoints" is an array of definitions.
func Parse(file string, data []byte, f Format) ([]*Source, error) {
	doc, err := decode(file, data, f)
	if err != nil {
		return nil, err
	}
	m, ok := doc.value.(map[string]any)
	if !ok {
		return nil, &FieldError{File: file, Rule: "not-an-object", Msg: "a definition document is a JSON object"}
	}
	if list, ok := m["endpoints"]; ok && len(m) == 1 {
		arr, ok := list.([]any)
		if !ok {
			return nil, &FieldError{File: file, Field: "endpoints", Line: doc.line("endpoints"), Rule: "type", Msg: "endpoints must be an array of definitions"}
		}
		out := make([]*Source, 0, len(arr))
		for i, v := range arr {
			out = append(out, &Source{File: file, Field: fmt.Sprintf("endpoints[%d]", i), value: v, doc: doc})
		}
		return out, nil
	}
	return []*Source{{File: file, value: m, doc: doc}}, nil
}

// Endpoint is a validated, compiled endpoint definition.
type Endpoint struct {
	Def      *Definition
	Template *route.Template
	// Warnings are AGIS authoring findings that do not refuse the endpoint.
	Warnings []string
	// JSON is the full definition (handler binding included), normalised:
	// AGIS aliases rewritten, capability filled in.
	JSON []byte

	input, output *compiledSchema
	paramTypes    map[string]string
}

// Known members; anything else is refused so typos surface at load.
var (
	topKeys = []string{"method", "path", "description", "namespace", "semantic", "input_schema", "output_schema",
		"errors", "handler", "required_scopes", "deprecated", "anonymous", "idempotency_key_required", "max_body_bytes", "agp"}
	semanticKeys   = []string{"intent", "actor", "outcome", "capability", "confidence", "impact", "is_idempotent", "parameter_hints", "state_transition", "mcp_tool_name", "confidence_guidance", "impact_tier"}
	handlerKeys    = map[string][]string{HandlerRegisteredFunction: {"type", "function"}, HandlerComposition: {"type", "recipe"}, HandlerExternalService: {"type", "url", "method", "headers", "input_transform", "output_transform", "error_map", "timeout_seconds", "idempotency_header"}}
	deprecatedKeys = []string{"deprecated_in", "removed_in", "successor"}
	successorKeys  = []string{"method", "path"}
	requiredTop    = []string{"method", "path", "description", "semantic", "input_schema", "output_schema", "errors", "handler"}
)

// Capabilities are the semantic.capability values (AGTP-API §7.1).
var Capabilities = []string{"discovery", "retrieval", "analysis", "transaction", "modification", "creation", "notification", "mechanics", "domain_spanning"}

// Impacts are the semantic.impact values.
var Impacts = []string{"informational", "reversible", "irreversible"}

var (
	errorNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	functionRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	recipeRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	placeRe     = regexp.MustCompile(`\$\{([^}]*)\}`)
	envNameRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	mcpToolRe   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	snakeRe     = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	versionRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	// AGIS §13 prompt-injection screens on agent-facing prose.
	injectionRe = regexp.MustCompile(`(?i)ignore (all |any )?(previous|prior) instructions|\byou are (now )?an?\b|\bsystem prompt\b`)
)

// Length caps (AGIS §13 caps intent and outcome at 500 characters).
const (
	maxProse       = 500
	maxDescription = 1000
	maxErrors      = 128
	maxScopes      = 64
)

// forbiddenUpstreamHeaders are identity headers an external_service
// binding must never forward (AGTP-API §12.3; both draft spellings).
var forbiddenUpstreamHeaders = []string{"agent-id", "agtp-agent-id", "agtp-principal-id", "principal-id"}

var upstreamMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

type checker struct {
	src  *Source
	errs Errors
	warn []string
}

func (c *checker) fail(field, rule, format string, a ...any) {
	full := field
	if c.src.Field != "" {
		full = join(c.src.Field, field)
	}
	line := c.src.doc.line(full)
	for l, f := 0, full; line == 0 && f != "" && l < 8; l++ {
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
		line = c.src.doc.line(f)
	}
	c.errs = append(c.errs, &FieldError{File: c.src.File, Line: line, Field: full, Rule: rule, Msg: fmt.Sprintf(format, a...)})
}

func (c *checker) warnf(field, format string, a ...any) {
	c.warn = append(c.warn, fmt.Sprintf("%s: %s", field, fmt.Sprintf(format, a...)))
}

// Compile validates one source against ctx and compiles its schemas.
func Compile(src *Source, ctx Context) (*Endpoint, error) {
	c := &checker{src: src}
	m, ok := src.value.(map[string]any)
	if !ok {
		c.fail("", "not-an-object", "a definition is a JSON object")
		return nil, c.errs
	}
	c.structure(m)
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	raw, err := json.Marshal(m)
	if err != nil {
		c.fail("", "json", "%v", err)
		return nil, c.errs
	}
	def := &Definition{}
	if err := json.Unmarshal(raw, def); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			c.fail(te.Field, "type", "must be a JSON %s", jsonKind(te.Type.Kind().String()))
		} else {
			c.fail("", "json", "%v", err)
		}
		return nil, c.errs
	}
	ep := &Endpoint{Def: def}
	cats := c.method(def, ctx)
	c.semantic(def, cats, ctx)
	ep.Template = c.path(def, ctx)
	ep.input, ep.output = c.schemas(def, ep.Template)
	c.errorsList(def)
	c.handler(def, ctx)
	c.scopes(def)
	c.tier2(def, ep.input)
	c.deprecation(def, ctx)
	c.agp(def)
	if def.MaxBodyBytes < 0 {
		c.fail("max_body_bytes", "range", "must not be negative")
	}
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	ep.Warnings = c.warn
	if ep.input != nil {
		ep.paramTypes = propertyTypes(ep.input.doc)
	}
	ep.JSON, err = json.Marshal(def)
	if err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	return ep, nil
}

// ParseAndCompile is Parse then Compile of every document, collecting all
// errors of the file.
func ParseAndCompile(file string, data []byte, f Format, ctx Context) ([]*Endpoint, error) {
	srcs, err := Parse(file, data, f)
	if err != nil {
		return nil, err
	}
	var out []*Endpoint
	var errs Errors
	for _, s := range srcs {
		ep, err := Compile(s, ctx)
		if err != nil {
			var es Errors
			if errors.As(err, &es) {
				errs = append(errs, es...)
				continue
			}
			return nil, err
		}
		out = append(out, ep)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// FromJSON compiles a definition that was validated before, such as a
// snapshot's definition_json, without catalog checks.
func FromJSON(definitionJSON []byte) (*Endpoint, error) {
	srcs, err := Parse("definition_json", definitionJSON, FormatJSON)
	if err != nil {
		return nil, err
	}
	if len(srcs) != 1 {
		return nil, errors.New("endpoint: definition_json holds more than one definition")
	}
	return Compile(srcs[0], Context{InheritCapability: true, AllowReserved: func(string) bool { return true }})
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	}
	return "number"
}

// structure checks members before typed decoding: unknown members,
// required members, and the AGIS aliases.
func (c *checker) structure(m map[string]any) {
	unknown := func(field string, obj map[string]any, known []string) {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !slices.Contains(known, k) {
				c.fail(join(field, k), "unknown-field", "not a field of an AGTP-API endpoint definition")
			}
		}
	}
	unknown("", m, topKeys)
	for _, k := range requiredTop {
		if v, ok := m[k]; !ok || v == nil {
			c.fail(k, "required", "required by AGTP-API §6.3")
		}
	}
	if sem, ok := m["semantic"].(map[string]any); ok {
		unknown("semantic", sem, semanticKeys)
		for alias, name := range map[string]string{"confidence_guidance": "confidence", "impact_tier": "impact"} {
			if v, ok := sem[alias]; ok {
				if _, both := sem[name]; both {
					c.fail("semantic."+alias, "alias-conflict", "give %s or its AGIS name %s, not both", name, alias)
				}
				sem[name] = v
				delete(sem, alias)
			}
		}
	} else if _, ok := m["semantic"]; ok {
		c.fail("semantic", "type", "must be a JSON object")
	}
	if h, ok := m["handler"].(map[string]any); ok {
		t, _ := h["type"].(string)
		if known, ok := handlerKeys[t]; ok {
			unknown("handler", h, known)
		} else {
			c.fail("handler.type", "handler-type", "must be registered_function, composition or external_service (AGTP-API §12)")
		}
	} else if _, ok := m["handler"]; ok {
		c.fail("handler", "type", "must be a JSON object")
	}
	if a, ok := m["agp"].(map[string]any); ok {
		unknown("agp", a, agpKeys)
	}
	if d, ok := m["deprecated"].(map[string]any); ok {
		unknown("deprecated", d, deprecatedKeys)
		if s, ok := d["successor"].(map[string]any); ok {
			unknown("deprecated.successor", s, successorKeys)
		}
	}
	for _, k := range []string{"input_schema", "output_schema"} {
		if v, ok := m[k]; ok && v != nil {
			if _, isObj := v.(map[string]any); !isObj {
				c.fail(k, "schema-object", "must be a JSON Schema object")
			}
		}
	}
}

func (c *checker) method(def *Definition, ctx Context) []string {
	switch {
	case !agtp.ValidMethodToken(def.Method):
		c.fail("method", "method-lexical", "%q breaks ^[A-Z]{3,32}$ (AGTP-API §3.2; AGIS pass 2)", def.Method)
		return nil
	case slices.Contains(route.LegacyVerbs, def.Method):
		c.fail("method", "method-legacy", "legacy verbs must not be used in endpoint definitions (AGTP-API §3.6)")
		return nil
	}
	if slices.Contains([]string{"HEAD", "OPTIONS", "CONNECT", "TRACE"}, def.Method) {
		c.fail("method", "method-prohibited", "HTTP method names are not AGTP methods (AGIS §4.3)")
		return nil
	}
	if slices.Contains([]string{"AVAILABLE", "ACTIVE", "EXISTS", "STATUS", "DATA", "INFO"}, def.Method) {
		c.warnf("method", "%s is on the AGIS stoplist of state or noun words (AGIS §4.2, pass 3)", def.Method)
	}
	if ctx.Method == nil {
		return nil
	}
	cats, ok := ctx.Method(def.Method)
	if !ok {
		c.fail("method", "method-not-in-catalog", "%s is neither in the method catalog in use nor a custom method of this server (AGTP-API §3, §4.5)", def.Method)
	}
	return cats
}

func (c *checker) semantic(def *Definition, cats []string, ctx Context) {
	s := &def.Semantic
	prose := func(field, v string) {
		switch {
		case strings.TrimSpace(v) == "":
			c.fail(field, "required", "must be a non-empty string (AGTP-API §7.1; AGIS pass 5)")
		case len(v) > maxProse:
			c.fail(field, "too-long", "at most %d characters (AGIS §13)", maxProse)
		case injectionRe.MatchString(v):
			c.warnf(field, "reads like an instruction to a model (AGIS §13 prompt-injection screen)")
		}
	}
	prose("semantic.intent", s.Intent)
	prose("semantic.outcome", s.Outcome)
	if strings.TrimSpace(s.Actor) == "" {
		c.fail("semantic.actor", "required", "must be a non-empty string; any value is accepted (AGTP-API §7.1)")
	} else if len(s.Actor) > 64 {
		c.fail("semantic.actor", "too-long", "at most 64 characters")
	}
	if s.Capability == "" && ctx.InheritCapability && len(cats) > 0 {
		s.Capability = cats[0]
	}
	switch {
	case s.Capability == "":
		c.fail("semantic.capability", "required", "one of %s (AGTP-API §7.1)", strings.Join(Capabilities, ", "))
	case !slices.Contains(Capabilities, s.Capability):
		c.fail("semantic.capability", "capability-enum", "%q is not one of %s", s.Capability, strings.Join(Capabilities, ", "))
	case len(cats) > 0 && !slices.Contains(cats, s.Capability):
		c.warnf("semantic.capability", "%s is not among %s's catalog categories %v (AGIS pass 6)", s.Capability, def.Method, cats)
	}
	switch {
	case s.Confidence == nil:
		c.fail("semantic.confidence", "required", "a number from 0.0 to 1.0 (AGTP-API §7.1)")
	case *s.Confidence < 0 || *s.Confidence > 1:
		c.fail("semantic.confidence", "confidence-range", "%v is outside the closed interval 0.0-1.0", *s.Confidence)
	}
	switch {
	case s.Impact == "":
		c.fail("semantic.impact", "required", "one of informational, reversible, irreversible (AGTP-API §7.1)")
	case !slices.Contains(Impacts, s.Impact):
		c.fail("semantic.impact", "impact-enum", "%q is not one of informational, reversible, irreversible", s.Impact)
	}
	if s.IsIdempotent == nil {
		c.fail("semantic.is_idempotent", "required", "a boolean (AGTP-API §7.1)")
	}
	if len(c.errs) == 0 {
		if s.Impact == "irreversible" && *s.Confidence < 0.85 {
			c.warnf("semantic.confidence", "irreversible endpoints should declare at least 0.85 (AGIS §6)")
		}
		if s.Impact == "informational" && !*s.IsIdempotent {
			c.warnf("semantic.is_idempotent", "an informational endpoint changes no state and is usually idempotent (AGIS pass 6)")
		}
	}
	if s.MCPToolName != "" && !mcpToolRe.MatchString(s.MCPToolName) {
		c.fail("semantic.mcp_tool_name", "mcp-tool-name", "lowercase letters, digits and _ (AGIS App. C)")
	}
	for i, st := range s.StateTransition {
		if !strings.Contains(st, "->") {
			c.fail(fmt.Sprintf("semantic.state_transition[%d]", i), "state-transition", "written \"field: FROM -> TO\" (AGIS §6)")
		}
	}
	if strings.TrimSpace(def.Description) == "" {
		c.fail("description", "required", "one sentence for operators (AGTP-API §6.4)")
	} else if len(def.Description) > maxDescription {
		c.fail("description", "too-long", "at most %d characters", maxDescription)
	}
	if len(def.Namespace) > 128 {
		c.fail("namespace", "too-long", "at most 128 characters")
	}
}

func (c *checker) path(def *Definition, ctx Context) *route.Template {
	tp, err := route.ParseTemplate(def.Path, ctx.Verbs)
	if err != nil {
		var ge *route.GrammarError
		if errors.As(err, &ge) {
			if ge.Segment != "" {
				c.fail("path", ge.Rule, "segment %q: %s (AGTP-API §5)", ge.Segment, ge.Detail)
			} else {
				c.fail("path", ge.Rule, "%s (AGTP-API §5)", ge.Detail)
			}
		} else {
			c.fail("path", "path-grammar", "%v", err)
		}
		return nil
	}
	if def.Method == agtp.MethodDiscover && def.Path != "/" {
		if r := route.ReservedDiscoverConflict(def.Path); r != "" && (ctx.AllowReserved == nil || !ctx.AllowReserved(def.Path)) {
			c.fail("path", route.RuleReservedDiscovery, "DISCOVER %s would shadow the reserved built-in %s (AGTP-API §5.9)", def.Path, r)
		}
	}
	if def.Method == agtp.MethodDiscover && def.Path == "/" && (ctx.AllowReserved == nil || !ctx.AllowReserved("/")) {
		c.fail("path", route.RuleReservedDiscovery, "DISCOVER / is the built-in directory (AGTP-API §5.8.3)")
	}
	for _, p := range tp.Params {
		if !snakeRe.MatchString(p) {
			c.warnf("path", "parameter %s is not snake_case (AGIS §7)", p)
		}
	}
	return tp
}

func (c *checker) errorsList(def *Definition) {
	if len(def.Errors) > maxErrors {
		c.fail("errors", "too-many", "at most %d error names", maxErrors)
		return
	}
	for i, e := range def.Errors {
		f := fmt.Sprintf("errors[%d]", i)
		switch {
		case !errorNameRe.MatchString(e):
			c.fail(f, "error-name", "%q is not a lowercase snake_case name of at most 64 characters", e)
		case slices.Index(def.Errors, e) != i:
			c.fail(f, "error-duplicate", "%s is listed twice", e)
		case e == "error" || e == "failure":
			c.warnf(f, "generic error names are not recommended (AGIS §7)")
		}
	}
}

func (c *checker) handler(def *Definition, ctx Context) {
	h := &def.Handler
	switch h.Type {
	case HandlerRegisteredFunction:
		switch {
		case h.Function == "":
			c.fail("handler.function", "required", "a registered_function binding names its function (AGTP-API §12.2)")
		case len(h.Function) > 256 || !functionRe.MatchString(h.Function):
			c.fail("handler.function", "function-name", "%q is not a dotted name", h.Function)
		case ctx.Functions != nil && !ctx.Functions(h.Function):
			c.fail("handler.function", "handler-unresolved", "no function %s is registered (AGTP-API §12.2, §13.2)", h.Function)
		}
	case HandlerComposition:
		switch {
		case h.Recipe == "":
			c.fail("handler.recipe", "required", "a composition binding names its recipe (AGTP-API §12.1)")
		case !recipeRe.MatchString(h.Recipe):
			c.fail("handler.recipe", "recipe-name", "%q is not a recipe name", h.Recipe)
		case ctx.Recipes != nil && !ctx.Recipes(h.Recipe):
			c.fail("handler.recipe", "handler-unresolved", "no recipe %s is registered (AGTP-API §12.1)", h.Recipe)
		}
		if !slices.Contains(def.Errors, CompositionError) {
			c.fail("errors", "composition-errors", "a composition endpoint must list composition_failed (AGTP-API §12.1)")
		}
	case HandlerExternalService:
		c.external(def, ctx)
	}
}

func (c *checker) external(def *Definition, ctx Context) {
	h := &def.Handler
	u, err := url.Parse(h.URL)
	switch {
	case h.URL == "":
		c.fail("handler.url", "required", "an external_service binding names its upstream URL (AGTP-API §12.3)")
	case err != nil || u.Host == "":
		c.fail("handler.url", "url", "not an absolute URL")
	case u.Scheme != "https":
		c.fail("handler.url", "url-https", "the upstream URL must use https:// (AGTP-API §12.3)")
	case u.User != nil:
		c.fail("handler.url", "url-userinfo", "credentials belong in headers, not the URL")
	}
	if p := URLParamOutsidePath(h.URL); p != "" {
		c.fail("handler.url", "url-param-place", "%s is outside the URL's path: an input value may fill path segments only, not the host, port, query or fragment", p)
	}
	if !slices.Contains(upstreamMethods, h.Method) {
		c.fail("handler.method", "upstream-method", "required; one of %s (AGTP-API §12.3)", strings.Join(upstreamMethods, ", "))
	}
	names := make([]string, 0, len(h.Headers))
	for k := range h.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := h.Headers[k]
		f := "handler.headers." + k
		if slices.Contains(forbiddenUpstreamHeaders, strings.ToLower(k)) {
			c.fail(f, "identity-forwarding", "agent and principal identity headers are never forwarded upstream (AGTP-API §12.3)")
			continue
		}
		if !validHeaderName(k) {
			c.fail(f, "header-name", "not an HTTP field name")
			continue
		}
		for _, mt := range placeRe.FindAllStringSubmatch(v, -1) {
			name := mt[1]
			switch {
			case !envNameRe.MatchString(name):
				c.fail(f, "placeholder", "${%s} is not a valid variable name", name)
			case ctx.LookupEnv != nil:
				if _, ok := ctx.LookupEnv(name); !ok {
					c.fail(f, "placeholder-unresolved", "${%s} is not set in the environment (AGTP-API §12.3)", name)
				}
			}
		}
	}
	if v := h.IdempotencyHeader; v != "" {
		switch {
		case !validHeaderName(v):
			c.fail("handler.idempotency_header", "header-name", "not an HTTP field name")
		case slices.Contains(forbiddenUpstreamHeaders, strings.ToLower(v)):
			c.fail("handler.idempotency_header", "identity-forwarding", "agent and principal identity headers are never forwarded upstream (AGTP-API §12.3)")
		}
	}
	for k := range h.Headers {
		if strings.EqualFold(k, h.UpstreamIdempotencyHeader()) {
			c.warnf("handler.headers."+k, "the request's Idempotency-Key is sent in %s and replaces this value", h.UpstreamIdempotencyHeader())
		}
	}
	for _, tr := range []struct {
		name string
		m    map[string]string
	}{{"input_transform", h.InputTransform}, {"output_transform", h.OutputTransform}} {
		seen := map[string]string{}
		for k, v := range tr.m {
			if k == "" || v == "" {
				c.fail("handler."+tr.name, "transform", "names on both sides must be non-empty")
			}
			if prev, dup := seen[v]; dup {
				c.fail("handler."+tr.name, "transform", "%s and %s map to the same upstream name %s", prev, k, v)
			}
			seen[v] = k
		}
	}
	for code, name := range h.ErrorMap {
		f := "handler.error_map." + code
		n, err := strconv.Atoi(code)
		if err != nil || len(code) != 3 || n < 100 || n > 599 {
			c.fail(f, "error-map-status", "keys are HTTP status codes written as strings")
		}
		if !slices.Contains(def.Errors, name) {
			c.fail(f, "error-map-undeclared", "%s must be listed in errors (AGTP-API §12.3)", name)
		}
	}
	if len(h.ErrorMap) == 0 {
		c.warnf("handler.error_map", "external_service bindings should map upstream errors (AGTP-API §12.3)")
	}
	if h.TimeoutSeconds != nil && (*h.TimeoutSeconds <= 0 || *h.TimeoutSeconds > 600) {
		c.fail("handler.timeout_seconds", "timeout-range", "a positive number of seconds, at most 600")
	} else if h.TimeoutSeconds == nil {
		c.warnf("handler.timeout_seconds", "unset; the default of 30 s applies (AGTP-API §12.3 says set it)")
	}
	for _, e := range UpstreamErrors {
		if !slices.Contains(def.Errors, e) {
			c.fail("errors", "upstream-errors", "an external_service endpoint must list %s (AGTP-API §12.3)", e)
		}
	}
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0) {
			return false
		}
	}
	return true
}

func (c *checker) scopes(def *Definition) {
	if len(def.RequiredScopes) > maxScopes {
		c.fail("required_scopes", "too-many", "at most %d scopes", maxScopes)
		return
	}
	for i, s := range def.RequiredScopes {
		if _, err := agtp.ParseScope(s); err != nil {
			c.fail(fmt.Sprintf("required_scopes[%d]", i), "scope-token", "%q is not a scope token (domain:action, lowercase)", s)
		}
	}
}

func (c *checker) deprecation(def *Definition, ctx Context) {
	d := def.Deprecated
	if d == nil {
		return
	}
	if !versionRe.MatchString(d.DeprecatedIn) {
		c.fail("deprecated.deprecated_in", "required", "the version at which the endpoint became deprecated (AGTP-API §6.5)")
	}
	if d.RemovedIn != "" && !versionRe.MatchString(d.RemovedIn) {
		c.fail("deprecated.removed_in", "version", "%q is not a version string", d.RemovedIn)
	}
	if s := d.Successor; s != nil {
		if s.Method == "" && s.Path == "" {
			c.fail("deprecated.successor", "successor-empty", "give method, path or both")
		}
		if s.Method != "" && !agtp.ValidMethodToken(s.Method) {
			c.fail("deprecated.successor.method", "method-lexical", "%q breaks ^[A-Z]{3,32}$", s.Method)
		}
		if s.Path != "" {
			if _, err := route.ParseTemplate(s.Path, ctx.Verbs); err != nil {
				c.fail("deprecated.successor.path", "path-grammar", "%v", err)
			}
		}
	}
}

// canonicalJSON re-encodes a JSON value compactly (used for the schemas).
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}
