// Package coreparam recognises the parameters core §7.2 defines per
// method (QUERY's intent, scope, format and confidence_threshold;
// SUMMARIZE's source, length, focus, format and audience; PLAN's goal,
// constraints and available_methods; EXECUTE's action) and the context
// parameter every method accepts (core §7.1), on every endpoint of the
// method (docs/decisions.md#D-core-parameters).
//
// An endpoint's input schema forbids members it does not declare
// (AGTP-API §6.4), so a client written to the core draft, which sends
// {"intent": "..."} with every QUERY, would get 422 from every operator
// endpoint. The input stage therefore takes the core parameters out of the
// request's parameters before the endpoint's schema sees them, checks them
// by the draft's own rules, and hands them to the handler beside its input.
// A member the endpoint's schema declares stays the endpoint's.
package coreparam

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Bounds on what a peer controls. The body limit bounds the whole value;
// these bound the members a handler reads as text.
const (
	// MaxText bounds intent, goal, focus, audience and a scope string.
	MaxText = 4096
	// MaxAction bounds EXECUTE's action name.
	MaxAction = 256
	// MaxItems bounds scope and available_methods arrays.
	MaxItems = 64
	// MaxItem bounds one scope entry.
	MaxItem = 256
)

// Reason is the AGTP reason of a request refused for its core
// parameters (422, with the violations).
const Reason = "core-parameter-invalid"

// Params are the core parameters of one request, validated, as their
// JSON values (json.Number for numbers); nil when it had none.
type Params map[string]any

// String is a parameter's value when it is a string, else "".
func (p Params) String(name string) string {
	s, _ := p[name].(string)
	return s
}

// Number is a parameter's value when it is a number.
func (p Params) Number(name string) (float64, bool) {
	switch v := p[name].(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
	case float64:
		return v, true
	}
	return 0, false
}

// JSON is the parameters as a JSON object, nil when there are none.
func (p Params) JSON() json.RawMessage {
	if len(p) == 0 {
		return nil
	}
	b, err := json.Marshal(map[string]any(p))
	if err != nil {
		return nil
	}
	return b
}

// rule is one core parameter: how its value is checked, and whether the
// method's root form (the method on /, where nothing but the parameters
// says what is wanted) requires it.
type rule struct {
	name string
	// check returns "" for a valid value, else what is wrong with it.
	check func(v any) string
	// fromQuery converts a query-string value to the parameter's type.
	fromQuery func(s string) any
	atRoot    bool
}

// The draft's value sets (core §7.2.1, §7.2.5).
var (
	queryFormats     = []string{"structured", "natural", "raw"}
	summarizeFormats = []string{"bullets", "prose", "structured"}
	summaryLengths   = []string{"brief", "standard", "detailed"}
)

// methods are the parameter tables of core §7.2 the suite recognises.
// PLAN also takes intent, as another name for goal: the other cognitive
// methods name their subject intent and core-draft clients send it.
var methods = map[string][]rule{
	agtp.MethodQuery: {
		{name: "intent", check: textOrObject(MaxText), atRoot: true},
		{name: "scope", check: scope},
		{name: "format", check: oneOf(queryFormats)},
		{name: "confidence_threshold", check: unit, fromQuery: number},
	},
	agtp.MethodSummarize: {
		{name: "source", check: text(0), atRoot: true},
		{name: "length", check: oneOf(summaryLengths)},
		{name: "focus", check: text(MaxText)},
		{name: "format", check: oneOf(summarizeFormats)},
		{name: "audience", check: text(MaxText)},
	},
	agtp.MethodPlan: {
		{name: "goal", check: textOrObject(MaxText), atRoot: true},
		{name: "intent", check: textOrObject(MaxText)},
		{name: "constraints", check: constraints},
		{name: "available_methods", check: methodList},
	},
	agtp.MethodExecute: {
		{name: "action", check: text(MaxAction), atRoot: true},
	},
}

// every is what every method accepts (core §7.1: session context).
var every = []rule{{name: "context", check: func(any) string { return "" }}}

// byMethod is each method's rules followed by every's, built once.
var byMethod = func() map[string][]rule {
	m := make(map[string][]rule, len(methods))
	for name, rs := range methods {
		m[name] = append(append([]rule(nil), rs...), every...)
	}
	return m
}()

func rules(method string) []rule {
	if rs, ok := byMethod[method]; ok {
		return rs
	}
	return every
}

// RootForm reports whether ep is its method's root form, where the
// parameters the draft makes MUST are required: an endpoint on / whose
// input schema declares no member of its own. Where the schema declares
// members, its author said what the call takes, and its required list
// decides.
func RootForm(ep *endpoint.Endpoint) bool {
	return ep.Def.Path == "/" && !ep.DeclaresAny()
}

// Split takes the core parameters of method out of a request's query and
// body parameters (deleting them there; the body wins over the query, as
// for endpoint input) and validates them. declares reports whether the
// endpoint's input schema declares a member: such a member is the
// endpoint's and is left where it is. root is the method's root form
// (RootForm), where the parameters the draft makes MUST are required
// (PLAN: goal or intent). The violations use the endpoint validation report's
// form, so a refusal reads like the schema's own.
func Split(method string, root bool, declares func(string) bool, query url.Values, body map[string]any) (Params, []endpoint.Violation) {
	var out Params
	var bad []endpoint.Violation
	for _, r := range rules(method) {
		if declares != nil && declares(r.name) {
			continue
		}
		v, ok := body[r.name]
		if ok {
			delete(body, r.name)
			query.Del(r.name)
		} else if qs, inQuery := query[r.name]; inQuery {
			query.Del(r.name)
			if len(qs) == 0 {
				continue
			}
			ok, v = true, qs[len(qs)-1]
			if r.fromQuery != nil {
				v = r.fromQuery(qs[len(qs)-1])
			}
		}
		if !ok {
			continue
		}
		if msg := r.check(v); msg != "" {
			bad = append(bad, endpoint.Violation{Location: "/" + r.name, Keyword: "core-parameter", Message: r.name + " " + msg})
			continue
		}
		if out == nil {
			out = Params{}
		}
		out[r.name] = v
	}
	if root && bad == nil {
		bad = missing(method, declares, out)
	}
	return out, bad
}

// missing reports the root form's required parameters that are absent.
func missing(method string, declares func(string) bool, got Params) []endpoint.Violation {
	var bad []endpoint.Violation
	for _, r := range methods[method] {
		if !r.atRoot || declares != nil && declares(r.name) {
			continue
		}
		if _, ok := got[r.name]; ok {
			continue
		}
		if method == agtp.MethodPlan && r.name == "goal" {
			if _, ok := got["intent"]; ok {
				continue
			}
		}
		msg := r.name + " is required: " + method + " / names what is wanted by it alone (core §7.2)"
		bad = append(bad, endpoint.Violation{Location: "/" + r.name, Keyword: "core-parameter", Message: msg})
	}
	return bad
}

func number(s string) any {
	// ParseFloat also takes NaN and Inf, which are no JSON numbers: kept
	// as strings, they are refused as non-numbers, and never reach the
	// encoded parameters, which they would make unencodable.
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	}
	return s
}

// text is a non-blank string of at most max bytes (max 0: bounded by the
// body limit only).
func text(max int) func(any) string {
	return func(v any) string {
		s, ok := v.(string)
		switch {
		case !ok:
			return "must be a string"
		case strings.TrimSpace(s) == "":
			return "must not be empty"
		case max > 0 && len(s) > max:
			return fmt.Sprintf("is longer than %d bytes", max)
		case !utf8.ValidString(s):
			return "is not valid UTF-8"
		}
		return ""
	}
}

// textOrObject is a text or a structured (object) expression.
func textOrObject(max int) func(any) string {
	t := text(max)
	return func(v any) string {
		if _, ok := v.(map[string]any); ok {
			return ""
		}
		if _, ok := v.(string); !ok {
			return "must be a string or an object"
		}
		return t(v)
	}
}

func oneOf(values []string) func(any) string {
	return func(v any) string {
		s, _ := v.(string)
		for _, ok := range values {
			if s == ok {
				return ""
			}
		}
		return "must be one of " + strings.Join(values, ", ")
	}
}

// unit is a number in [0, 1] (a confidence).
func unit(v any) string {
	f, ok := Params{"v": v}.Number("v")
	if !ok || f < 0 || f > 1 {
		return "must be a number from 0 to 1"
	}
	return ""
}

// scope is a data domain or a list of them (the draft's example sends
// ["documents:research", "knowledge:session"]).
func scope(v any) string {
	switch t := v.(type) {
	case string:
		return text(MaxText)(t)
	case []any:
		if len(t) > MaxItems {
			return fmt.Sprintf("has more than %d entries", MaxItems)
		}
		for _, e := range t {
			if msg := text(MaxItem)(e); msg != "" {
				return "entries: each " + msg
			}
		}
		return ""
	}
	return "must be a string or an array of strings"
}

// constraints are time, cost, scope or policy limits: an object, a list
// or a sentence.
func constraints(v any) string {
	switch v.(type) {
	case map[string]any, []any:
		return ""
	case string:
		return text(MaxText)(v)
	}
	return "must be an object, an array or a string"
}

// methodList is PLAN's available_methods: method names.
func methodList(v any) string {
	list, ok := v.([]any)
	if !ok {
		return "must be an array of method names"
	}
	if len(list) > MaxItems {
		return fmt.Sprintf("has more than %d entries", MaxItems)
	}
	for _, e := range list {
		if s, _ := e.(string); !agtp.ValidMethodToken(s) {
			return "entries must be method names (3 to 32 capital letters)"
		}
	}
	return ""
}
