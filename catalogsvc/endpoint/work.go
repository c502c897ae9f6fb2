package endpoint

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// The work validating one value costs (docs/decisions.md#D-schema-bounds).
// The fan-out bounds keep the subschemas applied to each part of a value
// few, but a value has many parts: an items schema of 1,800 anyOf
// alternatives costs 10 s on a 2 KB array, and a pattern is matched in
// time proportional to the string's length times its program. So before
// the validator runs, the work is estimated over the compiled schema's
// graph, counting every applicator as if it applied (every alternative,
// then and else, every patternProperties entry), and a value that would
// cost more than maxValidationWork is refused.
const (
	// maxValidationWork bounds one validation, in units of about one
	// subschema applied (a microsecond or two when it fails, a fraction
	// when it passes). A 1 MiB body of 10,000 records of ten members is
	// about 120,000.
	maxValidationWork = 250_000
	// A pattern matches at about a hundred bytes times program
	// instructions per unit.
	regexpBytesPerUnit = 100
	// Length, format and const checks, and string enum values, read a
	// string at about a kilobyte per unit.
	stringBytesPerUnit = 1000
	// An object or array costs a unit per this many members or items the
	// validator goes through for unevaluatedProperties or
	// unevaluatedItems, or for the properties a subschema names.
	membersPerUnit = 16
)

// tooMuchWork is the violation of a value whose validation would cost
// more than maxValidationWork.
var tooMuchWork = fmt.Sprintf("the value is too large for this schema: validating it would apply more than %d subschemas "+
	"(a long string matched against a pattern, an enum, a list with uniqueItems count as several)", maxValidationWork)

// work estimates the cost of validating v against the graph's root, and
// reports whether it stays within maxValidationWork.
func (g *schemaGraph) work(v any) bool {
	w := &workCount{g: g, left: maxValidationWork}
	w.apply(0, v)
	return w.left >= 0
}

type workCount struct {
	g    *schemaGraph
	left int
	// sizes memoises the number of JSON values in an object or array.
	sizes map[uintptr]int
}

// size is the number of JSON values in v, v included.
func (w *workCount) size(v any) int {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Map && rv.Kind() != reflect.Slice || rv.Len() == 0 {
		return 1
	}
	if n, ok := w.sizes[rv.Pointer()]; ok {
		return n
	}
	n := 1
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			n += w.size(e)
		}
	case []any:
		for _, e := range t {
			n += w.size(e)
		}
	}
	if w.sizes == nil {
		w.sizes = map[uintptr]int{}
	}
	w.sizes[rv.Pointer()] = n
	return n
}

// apply counts node i applied to v, and what it applies in turn; it stops
// once nothing is left.
func (w *workCount) apply(i int, v any) {
	g, s, left := w.g, w.g.nodes[i], &w.left
	cost := 1
	switch t := v.(type) {
	case string:
		cost += len(t) * g.insts[i] / regexpBytesPerUnit
		if s.Format != nil || s.MinLength != nil || s.MaxLength != nil || s.Const != nil || s.Enum != nil {
			cost += len(t) / stringBytesPerUnit
		}
		if s.Enum != nil {
			cost += len(s.Enum.Values) / membersPerUnit
		}
	case json.Number, float64, int64:
		// Numbers compare as exact rationals.
		if s.Enum != nil {
			cost += len(s.Enum.Values)
		}
	case map[string]any:
		cost += (len(s.Properties) + len(s.Required)) / membersPerUnit
		if g.uneval {
			cost += len(t) / membersPerUnit
		}
	case []any:
		if s.UniqueItems {
			// Every item is hashed whole.
			cost += w.size(t)
		}
		if g.uneval {
			cost += len(t) / membersPerUnit
		}
	}
	if s.Const != nil || s.Enum != nil {
		// Compared whole, up to the size of the schema's own values.
		if _, ok := v.(string); !ok {
			cost += w.size(v) / membersPerUnit
		}
	}
	if *left -= cost; *left < 0 {
		return
	}
	for j := range g.adj[i] {
		e := &g.adj[i][j]
		switch e.kind {
		case sameValue:
			w.apply(e.to, v)
		case toMember:
			obj, _ := v.(map[string]any)
			if !e.any {
				if mv, ok := obj[e.name]; ok {
					w.apply(e.to, mv)
				}
				break
			}
			for k, mv := range obj {
				if *left -= 1 + len(k)*e.insts/regexpBytesPerUnit; *left < 0 {
					return
				}
				if e.matches(toMember, k) {
					w.apply(e.to, mv)
				}
			}
		case toItem:
			arr, _ := v.([]any)
			if !e.any {
				if e.from < len(arr) {
					w.apply(e.to, arr[e.from])
				}
				break
			}
			for k := e.from; k < len(arr) && *left >= 0; k++ {
				w.apply(e.to, arr[k])
			}
		case toName:
			obj, _ := v.(map[string]any)
			for k := range obj {
				if w.apply(e.to, k); *left < 0 {
					return
				}
			}
		}
		// toContent: content assertions are off, so contentSchema is
		// never applied.
		if *left < 0 {
			return
		}
	}
}
