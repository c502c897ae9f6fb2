package recipe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Pattern offers a recipe for a (method, path) the server does not
// register (AGTP-API §5.8.6, §10.1). The instantiated endpoint takes its
// contract (semantic block, schemas, errors) from Endpoint; its required
// scopes are the pattern's plus every step's.
type Pattern struct {
	RecipeName    string `json:"recipe_name"`
	RecipeVersion string `json:"recipe_version"`
	Description   string `json:"description,omitempty"`
	Method        string `json:"method"`
	// PathExact is a path template (literal or with {param}s); exactly one
	// of PathExact and PathRegex is set.
	PathExact string `json:"path_exact,omitempty"`
	// PathRegex is an RE2 expression matched against the whole of a
	// concrete, literal request path.
	PathRegex string `json:"path_regex,omitempty"`
	// DataClasses are the data_manifest classes (AGIS §8.3) the composite
	// reads; synthesis is refused when the manifest does not offer them.
	DataClasses    []string `json:"data_classes,omitempty"`
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// MinTrustTier is the least trusted caller tier admitted (1 is the
	// most trusted); 0 adds no restriction of its own.
	MinTrustTier int32            `json:"min_trust_tier,omitempty"`
	Endpoint     EndpointTemplate `json:"endpoint"`
	Steps        []Step           `json:"steps"`
	Output       any              `json:"output,omitempty"`

	regex    *regexp.Regexp
	template *route.Template
}

// EndpointTemplate is the instantiated endpoint's contract, without the
// method, path, handler and scopes that synthesis fills in.
type EndpointTemplate struct {
	Description            string          `json:"description"`
	Namespace              string          `json:"namespace,omitempty"`
	Semantic               json.RawMessage `json:"semantic"`
	InputSchema            json.RawMessage `json:"input_schema"`
	OutputSchema           json.RawMessage `json:"output_schema"`
	Errors                 []string        `json:"errors,omitempty"`
	IdempotencyKeyRequired bool            `json:"idempotency_key_required,omitempty"`
}

// File is the patterns file: {"patterns": [...]} in JSON or YAML.
type File struct {
	Patterns []*Pattern `json:"patterns"`
}

// MaxPatterns bounds one patterns file.
const MaxPatterns = 1024

var (
	nameRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	versionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	classRe   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
)

// ValidName reports whether s can name a recipe (the catalog's rule for
// composition bindings).
func ValidName(s string) bool { return nameRe.MatchString(s) }

// ValidVersion reports whether s can be a recipe version (opaque, §10.5).
func ValidVersion(s string) bool { return versionRe.MatchString(s) }

// Load parses and validates a patterns file (JSON or YAML, chosen by the
// file name or content). Every problem is reported.
func Load(file string, data []byte) ([]*Pattern, error) {
	v, err := endpoint.DecodeValue(file, data)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(f.Patterns) > MaxPatterns {
		return nil, fmt.Errorf("%s: at most %d patterns", file, MaxPatterns)
	}
	var errs []error
	names := map[string]bool{}
	pairs := map[string]bool{}
	for i, p := range f.Patterns {
		if p == nil {
			errs = append(errs, fmt.Errorf("%s: patterns[%d]: null", file, i))
			continue
		}
		if err := p.Compile(); err != nil {
			errs = append(errs, fmt.Errorf("%s: patterns[%d] (%s): %w", file, i, p.RecipeName, err))
			continue
		}
		if names[p.RecipeName] {
			errs = append(errs, fmt.Errorf("%s: patterns[%d]: recipe %s is declared twice", file, i, p.RecipeName))
		}
		names[p.RecipeName] = true
		if k := p.Method + " " + p.PathExact + p.PathRegex; pairs[k] {
			errs = append(errs, fmt.Errorf("%s: patterns[%d]: %s is declared twice", file, i, k))
		} else {
			pairs[k] = true
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f.Patterns, nil
}

// Compile validates the pattern and prepares its matchers.
func (p *Pattern) Compile() error {
	var errs []error
	if !ValidName(p.RecipeName) {
		errs = append(errs, fmt.Errorf("recipe_name %q: letters, digits, '.', '_' and '-', at most 128", p.RecipeName))
	}
	if !ValidVersion(p.RecipeVersion) {
		errs = append(errs, fmt.Errorf("recipe_version %q: letters, digits, '.', '_', '+' and '-', at most 64", p.RecipeVersion))
	}
	if !agtp.ValidMethodToken(p.Method) {
		errs = append(errs, fmt.Errorf("method %q is not an AGTP method token", p.Method))
	}
	switch {
	case (p.PathExact == "") == (p.PathRegex == ""):
		errs = append(errs, errors.New("exactly one of path_exact and path_regex is set (AGTP-API §5.8.6)"))
	case p.PathExact != "":
		t, err := route.ParseTemplate(p.PathExact, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("path_exact: %w", err))
		}
		p.template = t
	default:
		re, err := regexp.Compile(`^(?:` + p.PathRegex + `)$`)
		if err != nil {
			errs = append(errs, fmt.Errorf("path_regex: %w", err))
		}
		p.regex = re
	}
	for _, c := range p.DataClasses {
		if !classRe.MatchString(c) {
			errs = append(errs, fmt.Errorf("data_classes: %q is not a data class token", c))
		}
	}
	if _, err := agtp.ParseScopeList(p.RequiredScopes); err != nil {
		errs = append(errs, fmt.Errorf("required_scopes: %w", err))
	}
	if p.MinTrustTier < 0 || p.MinTrustTier > 3 {
		errs = append(errs, errors.New("min_trust_tier: 0 (none) or a trust tier 1-3"))
	}
	r := p.Recipe()
	if err := r.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		path := p.PathExact
		if path == "" {
			path = "/pattern"
		}
		ep, err := p.Instantiate(path, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("endpoint: %w", err))
		} else {
			props := schemaProperties(ep.Def.InputSchema)
			for _, m := range r.InputMembers() {
				if !props[m] {
					errs = append(errs, fmt.Errorf("the recipe reads input.%s, which endpoint.input_schema does not declare", m))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Recipe is the pattern's recipe.
func (p *Pattern) Recipe() *Recipe {
	return &Recipe{Name: p.RecipeName, Version: p.RecipeVersion, Steps: p.Steps, Output: p.Output}
}

// Path is path_exact or path_regex.
func (p *Pattern) Path() string {
	if p.PathExact != "" {
		return p.PathExact
	}
	return p.PathRegex
}

// MatchTemplate reports whether the pattern offers a proposed endpoint
// path (a template, as PROPOSE carries): path_exact by equality, path_regex
// only for a literal path it matches.
func (p *Pattern) MatchTemplate(method, path string) bool {
	if method != p.Method {
		return false
	}
	if p.template != nil {
		return p.PathExact == path
	}
	return p.regex != nil && !strings.Contains(path, "{") && p.regex.MatchString(path)
}

// MatchRequest reports whether the pattern serves a concrete request
// (the RCNS gate) and returns the path of the endpoint to instantiate:
// path_exact's template, or the request path itself for path_regex.
func (p *Pattern) MatchRequest(method, path string) (string, bool) {
	if method != p.Method {
		return "", false
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if p.template != nil {
		if _, ok := matchTemplate(p.template, path); ok {
			return p.PathExact, true
		}
		return "", false
	}
	if p.regex != nil && p.regex.MatchString(path) {
		return path, true
	}
	return "", false
}

// Definition returns the instantiated endpoint definition as a JSON
// object: the pattern's contract at (method, path) with a composition
// handler naming the recipe and the given required scopes. The caller may
// change members before compiling it.
func (p *Pattern) Definition(path string, scopes []string) map[string]any {
	e := p.Endpoint
	def := map[string]any{
		"method":        p.Method,
		"path":          path,
		"description":   e.Description,
		"semantic":      json.RawMessage(e.Semantic),
		"input_schema":  json.RawMessage(e.InputSchema),
		"output_schema": json.RawMessage(e.OutputSchema),
		"errors":        WithCompositionError(e.Errors),
		"handler":       map[string]any{"type": endpoint.HandlerComposition, "recipe": p.RecipeName},
	}
	if e.Namespace != "" {
		def["namespace"] = e.Namespace
	}
	if len(scopes) > 0 {
		def["required_scopes"] = scopes
	}
	if e.IdempotencyKeyRequired {
		def["idempotency_key_required"] = true
	}
	return def
}

// Instantiate compiles the pattern's endpoint at path, for validation and
// for the RCNS gate.
func (p *Pattern) Instantiate(path string, scopes []string) (*endpoint.Endpoint, error) {
	return CompileDefinition(p.Definition(path, scopes), endpoint.Context{})
}

// CompileDefinition validates an endpoint definition given as JSON values.
func CompileDefinition(def map[string]any, ctx endpoint.Context) (*endpoint.Endpoint, error) {
	raw, err := json.Marshal(def)
	if err != nil {
		return nil, fmt.Errorf("recipe: definition: %w", err)
	}
	srcs, err := endpoint.Parse("definition", raw, endpoint.FormatJSON)
	if err != nil {
		return nil, err
	}
	if len(srcs) != 1 {
		return nil, errors.New("recipe: one definition expected")
	}
	return endpoint.Compile(srcs[0], ctx)
}

// WithCompositionError returns errs with composition_failed, which every
// composition endpoint declares (AGTP-API §6.4, §12.1), sorted.
func WithCompositionError(errs []string) []string {
	out := append([]string(nil), errs...)
	if !slices.Contains(out, ErrorName) {
		out = append(out, ErrorName)
	}
	sort.Strings(out)
	return out
}

// Listing is the pattern as DISCOVER /patterns shows it.
func (p *Pattern) Listing() map[string]any {
	m := map[string]any{
		"recipe_name":    p.RecipeName,
		"recipe_version": p.RecipeVersion,
		"method":         p.Method,
	}
	if p.PathExact != "" {
		m["path_exact"] = p.PathExact
	} else {
		m["path_regex"] = p.PathRegex
	}
	if p.Description != "" {
		m["description"] = p.Description
	}
	if len(p.RequiredScopes) > 0 {
		m["required_scopes"] = p.RequiredScopes
	}
	if p.MinTrustTier > 0 {
		m["min_trust_tier"] = p.MinTrustTier
	}
	if len(p.DataClasses) > 0 {
		m["data_classes"] = p.DataClasses
	}
	steps := make([]map[string]string, len(p.Steps))
	for i, s := range p.Steps {
		steps[i] = map[string]string{"method": s.Method, "path": s.Path}
	}
	m["steps"] = steps
	return m
}

func schemaProperties(schema json.RawMessage) map[string]bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	out := make(map[string]bool, len(s.Properties))
	for k := range s.Properties {
		out[k] = true
	}
	return out
}

// SchemaProperties returns the property names an object schema declares.
func SchemaProperties(schema json.RawMessage) map[string]bool { return schemaProperties(schema) }
