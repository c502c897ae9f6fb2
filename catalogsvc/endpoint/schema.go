package endpoint

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agtpsuite/agtp/catalogsvc/route"
)

// Draft202012 is the only JSON Schema dialect AGTP-API §6.4 admits.
const Draft202012 = "https://json-schema.org/draft/2020-12/schema"

type compiledSchema struct {
	doc    map[string]any
	schema *jsonschema.Schema
	graph  *schemaGraph
}

// noLoader refuses every external reference: AGTP-API v00 schemas are
// inline only (§6.4, §18), and a catalog service must not fetch URLs
// named by a definition file.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("external schema %s: schemas are inline only (AGTP-API §6.4)", u)
}

// compileSchema compiles a schema within the bounds of bounds.go, which
// every schema meets whoever wrote it: an operator's catalog, a PUT, a
// PROPOSE or a contract.
func compileSchema(name string, raw []byte) (*compiledSchema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, bound("", "the schema is %d bytes, more than %d", len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("a schema here is a JSON object")
	}
	if s, ok := obj["$schema"]; ok && s != Draft202012 {
		return nil, fmt.Errorf("$schema %v is not %s (AGTP-API §6.4)", s, Draft202012)
	}
	if err := checkSchemaDoc(doc); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseRegexpEngine(compileRegexp)
	c.UseLoader(noLoader{})
	loc := "urn:agtp:endpoint:" + name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	g, err := checkFanOut(sch)
	if err != nil {
		return nil, err
	}
	return &compiledSchema{doc: obj, schema: sch, graph: g}, nil
}

// schemaFailure reports a schema that did not compile: a bound it passes,
// or what makes it invalid.
func (c *checker) schemaFailure(field string, err error) {
	var be *boundError
	if errors.As(err, &be) {
		c.fail(field, "schema-invalid", "the schema is beyond this server's bounds: %s (docs/catalogsvc.md \"Schema bounds\")", be)
		return
	}
	c.fail(field, "schema-invalid", "not a valid JSON Schema 2020-12 document: %s (AGIS pass 8)", oneLine(err))
}

// validate checks v against the schema. A number no schema may hold
// (bounds.go), or a value that would cost too much to validate (work.go),
// is refused before the validator sees it.
func (s *compiledSchema) validate(v any) *Report {
	var ne *NumberError
	if errors.As(CheckNumbers(v), &ne) {
		return &Report{Violations: []Violation{{Location: ne.Pointer, Message: ne.Error()}}}
	}
	if !s.graph.work(v) {
		return &Report{Violations: []Violation{{Location: "", Message: tooMuchWork}}}
	}
	if err := s.schema.Validate(v); err != nil {
		return report(err)
	}
	return nil
}

func (c *checker) schemas(def *Definition, tp *route.Template) (in, out *compiledSchema) {
	var err error
	if len(def.InputSchema) > 0 {
		def.InputSchema = canonicalJSON(def.InputSchema)
		in, err = compileSchema("input", def.InputSchema)
		if err != nil {
			c.schemaFailure("input_schema", err)
		} else {
			if in.doc["type"] != "object" {
				c.fail("input_schema.type", "input-type-object", "must be \"object\" (AGTP-API §6.4)")
			}
			if ap, ok := in.doc["additionalProperties"].(bool); !ok || ap {
				c.fail("input_schema.additionalProperties", "input-additional-properties", "must be false (AGTP-API §6.4, §13.3)")
			}
			if tp != nil {
				props, _ := in.doc["properties"].(map[string]any)
				for _, p := range tp.Params {
					if _, ok := props[p]; !ok {
						c.fail("input_schema.properties", "template-param-undeclared", "path parameter %s must be an input_schema property (AGTP-API §5.3)", p)
					}
				}
			}
			if props, ok := in.doc["properties"].(map[string]any); ok {
				for p := range props {
					if !snakeRe.MatchString(p) {
						c.warnf("input_schema.properties."+p, "parameter names should be snake_case (AGIS §7)")
					}
				}
			}
		}
	}
	if len(def.OutputSchema) > 0 {
		def.OutputSchema = canonicalJSON(def.OutputSchema)
		out, err = compileSchema("output", def.OutputSchema)
		if err != nil {
			c.schemaFailure("output_schema", err)
		} else if ap, ok := out.doc["additionalProperties"].(bool); ok && !ap {
			c.warnf("output_schema.additionalProperties", "should be true so handlers can add fields (AGTP-API §13.3)")
		}
	}
	return in, out
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// propertyTypes maps each top-level input property to its scalar type
// when the schema gives exactly one, so string values from the query and
// the path can be converted before validation.
func propertyTypes(doc map[string]any) map[string]string {
	props, _ := doc["properties"].(map[string]any)
	out := map[string]string{}
	for name, p := range props {
		pm, _ := p.(map[string]any)
		if t, ok := pm["type"].(string); ok {
			out[name] = t
		}
	}
	return out
}

// Violation is one entry of a validation report.
type Violation struct {
	// Location is the JSON Pointer of the offending value in the input.
	Location string `json:"location"`
	// Keyword is the schema keyword path that failed.
	Keyword string `json:"keyword"`
	Message string `json:"message"`
}

// Report is a failed validation, the body of a 422 (AGTP-API §13.2).
type Report struct {
	Violations []Violation `json:"violations"`
}

func (r *Report) Error() string {
	parts := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		parts[i] = fmt.Sprintf("%s: %s", v.Location, v.Message)
	}
	return "input does not match the schema: " + strings.Join(parts, "; ")
}

// A report's size is bounded: the validator's errors can number as many
// as the subschemas it applied, and a message can quote the whole value.
const (
	maxReportErrors       = 1000 // of the validator's error tree, rendered
	maxViolations         = 100
	maxViolationBytes     = 512
	maxReportMessageBytes = 16 << 10
)

func report(err error) *Report {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Report{Violations: []Violation{{Location: "", Keyword: "", Message: err.Error()}}}
	}
	budget := maxReportErrors
	out := pruneErrors(ve, &budget).BasicOutput()
	r := &Report{}
	size, more := 0, false
	for _, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		if len(r.Violations) == maxViolations || size > maxReportMessageBytes {
			more = true
			break
		}
		msg := u.Error.String()
		if len(msg) > maxViolationBytes {
			// The quoted value comes first, the reason last.
			h := maxViolationBytes / 2
			msg = strings.ToValidUTF8(msg[:h]+"…"+msg[len(msg)-h:], "")
		}
		size += len(msg)
		r.Violations = append(r.Violations, Violation{Location: u.InstanceLocation, Keyword: u.KeywordLocation, Message: msg})
	}
	if len(r.Violations) == 0 {
		r.Violations = []Violation{{Location: out.InstanceLocation, Keyword: out.KeywordLocation, Message: ve.Error()}}
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Location < r.Violations[j].Location })
	if more {
		r.Violations = append(r.Violations, Violation{Location: "", Keyword: "", Message: "more violations are not listed"})
	}
	return r
}

// pruneErrors copies the first *budget nodes of an error tree, depth
// first.
func pruneErrors(ve *jsonschema.ValidationError, budget *int) *jsonschema.ValidationError {
	*budget--
	cp := *ve
	cp.Causes = nil
	for _, c := range ve.Causes {
		if *budget <= 0 {
			break
		}
		cp.Causes = append(cp.Causes, pruneErrors(c, budget))
	}
	return &cp
}

// ValidateInput checks an input object against input_schema. The value
// must be built from JSON values (map[string]any, []any, string,
// float64 or json.Number, bool, nil). A number beyond MaxNumberBytes or
// a 64-bit float, or an input too large for the schema
// (docs/catalogsvc.md "Schema bounds"), is a violation of its own.
func (e *Endpoint) ValidateInput(v any) *Report {
	if e.input == nil {
		return nil
	}
	return e.input.validate(v)
}

// Declares reports whether the input schema names member among its
// top-level properties: such a member is the endpoint's own, whatever
// else a method's vocabulary says of the name
// (docs/decisions.md#D-core-parameters).
func (e *Endpoint) Declares(member string) bool {
	if e.input == nil {
		return false
	}
	props, _ := e.input.doc["properties"].(map[string]any)
	_, ok := props[member]
	return ok
}

// DeclaresAny reports whether the input schema names any top-level
// property.
func (e *Endpoint) DeclaresAny() bool {
	if e.input == nil {
		return false
	}
	props, _ := e.input.doc["properties"].(map[string]any)
	return len(props) > 0
}

// ValidateOutput checks a handler's result against output_schema. The
// schema's own additionalProperties governs extra members, so outputs are
// permissive unless the operator made them strict (AGTP-API §13.3).
func (e *Endpoint) ValidateOutput(v any) *Report {
	if e.output == nil {
		return nil
	}
	return e.output.validate(v)
}

// BuildInput assembles the object validated against input_schema, the
// form this project chose (docs/decisions.md#D-input-form):
//
//   - query parameters (percent-decoded, last value of a repeated key),
//   - then path parameters, which override the query,
//   - then the body's parameters object, which overrides the query
//     (AGTP-API §5.5: the body wins).
//
// A body or query member that names a path parameter with a different
// value is refused: the path identifies the resource and a silent choice
// would hide a client bug. Query and path values arrive as strings; when
// the property's schema type is integer, number or boolean they are
// converted first, so ?n=1 satisfies {"type":"integer"}.
//
// The body is the request's "parameters" object (the AGTP envelope
// {method, task_id, parameters, context} itself would always fail
// additionalProperties:false), or nil.
func (e *Endpoint) BuildInput(params []route.Param, query url.Values, body map[string]any) (map[string]any, *Report) {
	in := make(map[string]any, len(query)+len(params)+len(body))
	var conflicts []Violation
	for k, vs := range query {
		if len(vs) > 0 {
			in[k] = e.convert(k, vs[len(vs)-1])
		}
	}
	for _, p := range params {
		v := e.convert(p.Name, p.Value)
		if q, ok := query[p.Name]; ok && len(q) > 0 && q[len(q)-1] != p.Value {
			conflicts = append(conflicts, Violation{Location: "/" + p.Name, Keyword: "path", Message: fmt.Sprintf("query parameter %s contradicts the path parameter", p.Name)})
		}
		in[p.Name] = v
	}
	for k, v := range body {
		if pv, isPath := pathValue(params, k); isPath {
			if !sameScalar(v, e.convert(k, pv)) {
				conflicts = append(conflicts, Violation{Location: "/" + k, Keyword: "path", Message: fmt.Sprintf("body member %s contradicts the path parameter", k)})
			}
			continue
		}
		in[k] = v
	}
	if len(conflicts) > 0 {
		return nil, &Report{Violations: conflicts}
	}
	if r := e.ValidateInput(in); r != nil {
		return nil, r
	}
	return in, nil
}

func pathValue(params []route.Param, name string) (string, bool) {
	for _, p := range params {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

func sameScalar(a, b any) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func (e *Endpoint) convert(name, v string) any {
	switch e.paramTypes[name] {
	case "integer":
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case "number":
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	case "boolean":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}
