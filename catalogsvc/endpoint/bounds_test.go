//go:build unix

package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp/syntax"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/testkit"
)

// Generous ceilings on one refusal: the bombs cost seconds to minutes and
// GiBs before the bounds.
const (
	boundsMaxCPU   = 2 * time.Second
	boundsMaxAlloc = 256 << 20
)

func wantCheap(t *testing.T, f func()) {
	t.Helper()
	cpu, alloc := testkit.Cost(t, f)
	if cpu > boundsMaxCPU || alloc > boundsMaxAlloc {
		t.Fatalf("cost %v CPU, %d MiB allocated", cpu, alloc>>20)
	}
	t.Logf("cost %v CPU, %.1f MiB allocated", cpu, float64(alloc)/(1<<20))
}

// boundsDefinition is a definition whose input_schema is in.
func boundsDefinition(t *testing.T, in string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"method": "QUERY", "path": "/things", "description": "Returns the matching things.",
		"semantic": map[string]any{
			"intent": "Return the things that match.", "actor": "agent", "outcome": "The caller holds the matching things.",
			"capability": "retrieval", "confidence": 0.9, "impact": "informational", "is_idempotent": true,
		},
		"input_schema":  json.RawMessage(in),
		"output_schema": map[string]any{"type": "object"},
		"errors":        []any{},
		"handler":       map[string]any{"type": "registered_function", "function": "demo.things"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// boundsObject is an input schema with the given properties.
func boundsObject(props string, extra ...string) string {
	s := `{"type":"object","additionalProperties":false,"properties":{` + props + `}`
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

func notNest(n int) string {
	return strings.Repeat(`{"not":`, n) + `{}` + strings.Repeat(`}`, n)
}

// defsChain is $defs d0..dn, each applying the next twice.
func defsChain(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}`, n)
	return boundsObject(`"x":{"$ref":"#/$defs/d0"}`, `"$defs":{`+b.String()+`}`)
}

func manyProps(n int, schema func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"p%d":%s`, i, schema(i))
	}
	return strings.Join(parts, ",")
}

// Every schema bound refuses its bomb as schema-invalid, naming the
// bound, at a small cost.
func TestSchemaBoundsRefuseBombs(t *testing.T) {
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"21 KB pattern", boundsObject(`"x":{"type":"string","pattern":"` + strings.Repeat("a{1000}", 3000) + `"}`), "is 21000 bytes long, more than 1024"},
		{"1 KB pattern, 146,000 instructions", boundsObject(`"x":{"type":"string","pattern":"` + strings.Repeat("a{1000}", 146) + `"}`), "more than 10000 instructions"},
		{"patternProperties name", boundsObject(`"x":{"type":"object","patternProperties":{"` + strings.Repeat("a{1000}", 146) + `":{}}}`), "more than 10000 instructions"},
		{"patterns together", boundsObject(manyProps(12, func(int) string { return `{"type":"string","pattern":"` + strings.Repeat("a{100}", 99) + `"}` })), "more than 100000 instructions together"},
		{"60 multipleOf 1e-999999", boundsObject(manyProps(60, func(int) string { return `{"multipleOf":1e-999999}` })), "closer to zero than a 64-bit float"},
		{"minimum 1e999999", boundsObject(`"x":{"minimum":1e999999}`), "beyond the range of a 64-bit float"},
		{"a 70-digit number", boundsObject(`"x":{"maximum":` + strings.Repeat("9", 70) + `}`), "is 70 characters long"},
		{"a number in a const", boundsObject(`"x":{"const":[1e400]}`), "beyond the range of a 64-bit float"},
		{"not 1,500 deep", boundsObject(`"x":` + notNest(1500)), "nests deeper than 64 levels"},
		{"not 9,000 deep", boundsObject(`"x":` + notNest(9000)), "more than 65536"},
		{"$defs chain 12", defsChain(12), "applies more than 10000 subschemas"},
		{"$defs chain 21", defsChain(21), "applies more than 10000 subschemas"},
		{"$defs chain 24", defsChain(24), "applies more than 10000 subschemas"},
		{"schema over 64 KiB", boundsObject(manyProps(4000, func(int) string { return `{"type":"string"}` })), "more than 65536"},
		{"reference cycle on the same value", boundsObject(`"x":{"$ref":"#/$defs/a"}`, `"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}}`), "to the same value again"},
		{"recursion applying itself twice", boundsObject(`"x":{"$ref":"#/$defs/n"}`, `"$defs":{"n":{"type":"object","properties":{"a":{"allOf":[{"$ref":"#/$defs/n"},{"$ref":"#/$defs/n"}]}}}}`), "more than once to the same value"},
		{"recursion by name and pattern", boundsObject(`"x":{"$ref":"#/$defs/n"}`, `"$defs":{"n":{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"patternProperties":{"^a":{"$ref":"#/$defs/n"}}}}`), "more than once to the same value"},
		{"recursion into recursion", boundsObject(`"x":{"$ref":"#/$defs/s1"}`, `"$defs":{"s1":{"properties":{"x":{"$ref":"#/$defs/s1"}},"allOf":[{"$ref":"#/$defs/s2"}]},"s2":{"properties":{"x":{"$ref":"#/$defs/s2"}}}}`), "leads to another recursion"},
		{"$dynamicRef", boundsObject(`"x":{"$dynamicRef":"#node"}`, `"$defs":{"n":{"$dynamicAnchor":"node","type":"object","properties":{"c":{"$dynamicRef":"#node"}}}}`), "$dynamicRef are not accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := boundsDefinition(t, tc.schema)
			var err error
			wantCheap(t, func() { _, err = FromJSON(def) })
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("compiled, or failed otherwise: %v", err)
			}
			for _, e := range es {
				if e.Field == "input_schema" && e.Rule == "schema-invalid" {
					if !strings.Contains(e.Msg, tc.want) || !strings.Contains(e.Msg, "beyond this server's bounds") {
						t.Fatalf("message %q lacks %q", e.Msg, tc.want)
					}
					if len(e.Msg) > 600 {
						t.Fatalf("message is %d bytes", len(e.Msg))
					}
					return
				}
			}
			t.Fatalf("no input_schema schema-invalid in %v", err)
		})
	}
}

// Schemas within the bounds compile, recursive ones included when no
// value can be reached twice by the same subschema.
func TestSchemaBoundsAdmit(t *testing.T) {
	for _, tc := range []struct{ name, schema string }{
		{"patterns and numbers", boundsObject(`"id":{"type":"string","pattern":"^[A-Za-z0-9-]{1,64}$"},"n":{"type":"number","minimum":-1.5e308,"maximum":1e308,"multipleOf":5e-324},"q":{"type":"integer","maximum":123456789012345678901234567890}`)},
		{"1 KB pattern under the program bound", boundsObject(`"x":{"type":"string","pattern":"` + strings.Repeat("a{100}", 99) + `"}`)},
		{"64 levels", boundsObject(`"x":` + notNest(61))},
		{"$defs chain 11", defsChain(11)},
		{"$defs reused", boundsObject(manyProps(200, func(int) string { return `{"$ref":"#/$defs/addr"}` }), `"$defs":{"addr":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}}}}`)},
		{"tree", boundsObject(`"root":{"$ref":"#/$defs/node"}`, `"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}`)},
		{"binary tree", boundsObject(`"root":{"$ref":"#/$defs/node"}`, `"$defs":{"node":{"type":"object","properties":{"left":{"$ref":"#/$defs/node"},"right":{"$ref":"#/$defs/node"},"value":{"type":"integer"}}}}`)},
		{"filter expression", boundsObject(`"where":{"$ref":"#/$defs/f"}`, `"$defs":{"f":{"type":"object","properties":{"and":{"type":"array","items":{"$ref":"#/$defs/f"}},"or":{"type":"array","items":{"$ref":"#/$defs/f"}},"not":{"$ref":"#/$defs/f"},"field":{"type":"string"},"equals":{}},"additionalProperties":false}}`)},
		{"recursion by name and the others", boundsObject(`"x":{"$ref":"#/$defs/n"}`, `"$defs":{"n":{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"additionalProperties":{"$ref":"#/$defs/n"}}}`)},
		{"any JSON value", boundsObject(`"v":{"$ref":"#/$defs/json"}`, `"$defs":{"json":{"anyOf":[{"type":["string","number","boolean","null"]},{"type":"array","items":{"$ref":"#/$defs/json"}},{"type":"object","additionalProperties":{"$ref":"#/$defs/json"}}]}}`)},
		{"two recursions side by side", boundsObject(`"a":{"$ref":"#/$defs/s1"},"b":{"$ref":"#/$defs/s2"}`, `"$defs":{"s1":{"properties":{"x":{"$ref":"#/$defs/s1"}}},"s2":{"items":{"$ref":"#/$defs/s2"}}}`)},
		{"format regex", boundsObject(`"re":{"type":"string","format":"regex"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := FromJSON(boundsDefinition(t, tc.schema)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Every definition this repository ships compiles within the bounds.
func TestSchemaBoundsShippedDefinitions(t *testing.T) {
	for _, dir := range []string{"../demo", "../../deploy/k8s/overlays/prod/endpoints"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") || strings.HasPrefix(e.Name(), "_") {
				continue
			}
			b, err := os.ReadFile(dir + "/" + e.Name())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseAndCompile(e.Name(), b, FormatYAML, Context{InheritCapability: true}); err != nil {
				t.Errorf("%s: %v", e.Name(), err)
			}
		}
	}
}

func demoOrdersCreate(t *testing.T) *Endpoint {
	t.Helper()
	b, err := os.ReadFile("../demo/orders-create.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eps, err := ParseAndCompile("orders-create.yaml", b, FormatYAML, Context{InheritCapability: true})
	if err != nil {
		t.Fatal(err)
	}
	return eps[0]
}

func decodeNumbers(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A number no schema may hold is refused before validation, which would
// turn it into an exact rational; ordinary numbers validate as before.
func TestValidateInputNumberBounds(t *testing.T) {
	ep := demoOrdersCreate(t)
	line := func(q string) string { return `{"sku":"widget","quantity":` + q + `}` }
	lines := func(n int, q string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = line(q)
		}
		return `{"lines":[` + strings.Join(parts, ",") + `]}`
	}
	for _, tc := range []struct {
		name, body string
		// want is the refusal's message part, "" for accepted.
		want, location string
	}{
		{"60 × 1e999999", lines(60, "1e999999"), "beyond the range of a 64-bit float", "/lines/"},
		{"1e-999999", lines(1, "1e-999999"), "closer to zero", "/lines/0/quantity"},
		{"65 characters", lines(1, "1"+strings.Repeat("0", 64)), "65 characters long", "/lines/0/quantity"},
		{"ordinary", lines(3, "2"), "", ""},
		{"exponent form", lines(1, "2e2"), "", ""},
		{"zero with an exponent", lines(1, "0e-999"), "got 0, want 1", "/lines/0/quantity"},
		{"out of the schema's range", lines(1, "1e4"), "want 1,000", "/lines/0/quantity"},
		{"not an integer", lines(1, "2.5"), "want integer", "/lines/0/quantity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := decodeNumbers(t, tc.body)
			var r *Report
			wantCheap(t, func() { _, r = ep.BuildInput(nil, nil, body) })
			if tc.want == "" {
				if r != nil {
					t.Fatalf("refused: %v", r)
				}
				return
			}
			if r == nil || len(r.Violations) == 0 || !strings.Contains(r.Error(), tc.want) || !strings.HasPrefix(r.Violations[0].Location, tc.location) {
				t.Fatalf("report %v, want %q at %s", r, tc.want, tc.location)
			}
		})
	}
}

// format "regex" parses a value within the bounds and compiles nothing.
func TestFormatRegexBounded(t *testing.T) {
	ep, err := FromJSON(boundsDefinition(t, boundsObject(`"re":{"type":"string","format":"regex"}`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, value, want string }{
		{"ordinary", "^[a-z]+$", ""},
		{"invalid", "(", "missing closing )"},
		{"21 KB", strings.Repeat("a{1000}", 3000), "more than 1024"},
		{"146,000 instructions", strings.Repeat("a{1000}", 146), "more than 10000 instructions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *Report
			wantCheap(t, func() {
				for range 20 {
					r = ep.ValidateInput(map[string]any{"re": tc.value})
				}
			})
			if (r == nil) != (tc.want == "") || r != nil && !strings.Contains(r.Error(), tc.want) {
				t.Fatalf("report %v, want %q", r, tc.want)
			}
		})
	}
}

// progSize estimates what regexp/syntax compiles, within a factor of two.
func TestProgSizeEstimate(t *testing.T) {
	for _, p := range []string{
		"^[A-Za-z0-9-]{1,64}$", `^[0-9]{1,12}(\.[0-9]{1,2})?$`, "a{1000}", "(ab|cd)*x+y?", "(?:[a-z]{2,5}){3}",
		`^[a-zA-Z0-9.!#$%&'*+/=?^_{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`,
		strings.Repeat("a{100}", 99), "[a-z]{3,}",
	} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		est, real := progSize(re), len(prog.Inst)
		if est < real/2 || est > 2*real+8 {
			t.Errorf("%q: estimate %d, program %d", p, est, real)
		}
	}
}

// The largest schemas within the bounds are admitted. What they cost to
// compile (about 0.3 s on a quiet machine) is logged, not asserted: the
// race detector and a busy machine multiply it, and a cost is a
// benchmark's to check, not a test's.
func TestSchemaBoundsWorstAdmitted(t *testing.T) {
	chain := `{"properties":{"a":` + notNest(55) + `}}`
	chains := make([]string, 60_000/len(chain))
	for i := range chains {
		chains[i] = chain
	}
	for _, tc := range []struct{ name, schema string }{
		{"60 KB of subschemas 60 deep", boundsObject(`"x":{"anyOf":[` + strings.Join(chains, ",") + `]}`)},
		{"ten patterns of 9,900 instructions", boundsObject(manyProps(10, func(int) string { return `{"type":"string","pattern":"` + strings.Repeat("[a-z]{100}", 99) + `"}` }))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			cpu, alloc := testkit.Cost(t, func() { _, err = FromJSON(boundsDefinition(t, tc.schema)) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("compiled at %v CPU, %.1f MiB allocated", cpu, float64(alloc)/(1<<20))
		})
	}
}

// A value whose validation would cost too much is refused before the
// validator runs; a large ordinary body is not.
func TestValidationWorkBound(t *testing.T) {
	alts := make([]string, 1800)
	for i := range alts {
		alts[i] = fmt.Sprintf(`{"type":"integer","minimum":%d}`, i+1)
	}
	enum := make([]string, 2000)
	for i := range enum {
		enum[i] = fmt.Sprint(i + 1)
	}
	fields := make([]string, 10)
	for i := range fields {
		fields[i] = fmt.Sprintf(`"f%d":%d`, i, i*1000)
	}
	items := func(n int, item string) []any {
		out := make([]any, n)
		for i := range out {
			var v any
			if err := json.Unmarshal([]byte(item), &v); err != nil {
				t.Fatal(err)
			}
			out[i] = v
		}
		return out
	}
	for _, tc := range []struct {
		name, schema string
		value        map[string]any
		refused      bool
	}{
		{"1,000 items against 1,800 alternatives", `"x":{"type":"array","items":{"anyOf":[` + strings.Join(alts, ",") + `]}}`, map[string]any{"x": items(1000, "0")}, true},
		{"1 MiB string against a pattern", `"x":{"type":"string","pattern":"[a-z]{100}b"}`, map[string]any{"x": strings.Repeat("a", 1<<20)}, true},
		{"1,000 numbers against an enum of 2,000", `"x":{"type":"array","items":{"enum":[` + strings.Join(enum, ",") + `]}}`, map[string]any{"x": items(1000, "0")}, true},
		{"uniqueItems 200 times over 100,000 items", `"x":{"allOf":[` + strings.TrimSuffix(strings.Repeat(`{"uniqueItems":true},`, 200), ",") + `]}`, map[string]any{"x": items(100_000, `"a"`)}, true},
		{"10,000 records of ten members", `"x":{"type":"array","items":{"type":"object","properties":{` + manyProps(10, func(int) string { return `{"type":"integer","minimum":0}` }) + `}}}`, map[string]any{"x": items(10_000, "{"+strings.Join(fields, ",")+"}")}, false},
		{"64 KiB string against a pattern", `"x":{"type":"string","pattern":"^[a-z]*$"}`, map[string]any{"x": strings.Repeat("a", 64<<10)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := FromJSON(boundsDefinition(t, boundsObject(tc.schema)))
			if err != nil {
				t.Fatal(err)
			}
			var r *Report
			validate := func() { r = ep.ValidateInput(tc.value) }
			if tc.refused {
				// A refusal is cheap; what an admitted value costs is
				// the work bound's, and the race detector multiplies it.
				wantCheap(t, validate)
			} else {
				validate()
			}
			refused := r != nil && len(r.Violations) == 1 && strings.Contains(r.Violations[0].Message, "too large for this schema")
			if refused != tc.refused {
				t.Fatalf("report %.300v, want refused %v", r, tc.refused)
			}
			if !tc.refused && r != nil {
				t.Fatalf("report %.300v", r)
			}
		})
	}
}

// A report lists at most maxViolations violations of bounded length.
func TestReportBounded(t *testing.T) {
	ep, err := FromJSON(boundsDefinition(t, boundsObject(`"x":{"type":"array","items":{"type":"string","format":"email"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	long := make([]any, 500)
	for i := range long {
		long[i] = strings.Repeat("x", 4000)
	}
	var r *Report
	wantCheap(t, func() { r = ep.ValidateInput(map[string]any{"x": long}) })
	if r == nil || len(r.Violations) > maxViolations+1 || len(r.Error()) > 2*maxReportMessageBytes {
		t.Fatalf("%d violations, %d bytes", len(r.Violations), len(r.Error()))
	}
	for _, v := range r.Violations {
		if len(v.Message) > maxViolationBytes+8 {
			t.Fatalf("a message of %d bytes", len(v.Message))
		}
	}
}
