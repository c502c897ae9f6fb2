package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds on the work a schema and a value can cause
// (docs/decisions.md#D-schema-bounds). A schema comes from whoever wrote
// the definition (an operator's catalog, a PUT, a PROPOSE, a contract the
// front door runs) and is applied to every request, and the compiler and
// validator put no limit of their own on what they do: a counted
// repetition in a pattern is expanded, a number is an exact rational, a
// reference is followed every time it is reached. So a schema is checked
// against these bounds before it is compiled (size, nesting, numbers,
// regular expressions) and as soon as it is (fan-out), and a value's
// numbers before it is validated.
const (
	// MaxSchemaBytes bounds one input or output schema, in compact JSON.
	MaxSchemaBytes = 64 << 10
	// MaxPatternBytes bounds one regular expression: a pattern, a
	// patternProperties name, a value that must have format "regex".
	MaxPatternBytes = 1 << 10
	// maxRegexpInsts bounds the program one regular expression compiles
	// to. A counted repetition repeats what it applies to: a{1000} is a
	// thousand instructions, and seven bytes.
	maxRegexpInsts = 10_000
	// maxSchemaRegexpInsts bounds the programs of all of one schema's
	// regular expressions together.
	maxSchemaRegexpInsts = 100_000
	// MaxNumberBytes bounds a number literal, in a schema or in a value.
	MaxNumberBytes = 64
	// maxApplications bounds the subschemas one validation can apply:
	// the schema with every $ref replaced by what it names, and each
	// recursion counted once.
	maxApplications = 10_000
)

// boundError is a schema refused for a bound rather than for its meaning.
type boundError struct {
	at  string // JSON Pointer in the schema, "" for the whole
	msg string
}

func (e *boundError) Error() string {
	if e.at == "" {
		return e.msg
	}
	return e.at + ": " + e.msg
}

func bound(at, format string, a ...any) *boundError {
	return &boundError{at: at, msg: fmt.Sprintf(format, a...)}
}

// NumberError is a number that is too long or that a 64-bit float
// cannot hold.
type NumberError struct {
	// Pointer is the JSON Pointer of the number in the value.
	Pointer string
	Literal string
	Why     string
}

func (e *NumberError) Error() string {
	lit := e.Literal
	if len(lit) > 24 {
		lit = lit[:24] + "…"
	}
	at := e.Pointer
	if at == "" {
		at = "/"
	}
	return fmt.Sprintf("the number at %s (%s) %s: a number has at most %d characters and fits a 64-bit float", at, lit, e.Why, MaxNumberBytes)
}

// numberWhy says what is wrong with a number literal, or "".
func numberWhy(n json.Number) string {
	s := string(n)
	if len(s) > MaxNumberBytes {
		return fmt.Sprintf("is %d characters long", len(s))
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return "is not a number"
	case err != nil || math.IsInf(f, 0):
		return "is beyond the range of a 64-bit float"
	case f == 0 && strings.ContainsAny(mantissa(s), "123456789"):
		return "is closer to zero than a 64-bit float can be"
	}
	return ""
}

func mantissa(s string) string {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		return s[:i]
	}
	return s
}

// CheckNumbers returns a *NumberError for the first number of v (built
// from JSON values, numbers as json.Number) that is longer than
// MaxNumberBytes or outside a 64-bit float's finite range, or nil. The
// validator compares numbers as exact rationals, whose cost grows with
// the exponent: 1e999999 is a million-digit integer.
func CheckNumbers(v any) error {
	if e := numbers(v); e != nil {
		return e
	}
	return nil
}

func numbers(v any) *NumberError {
	switch t := v.(type) {
	case json.Number:
		if why := numberWhy(t); why != "" {
			return &NumberError{Literal: string(t), Why: why}
		}
	case map[string]any:
		for k, e := range t {
			if ne := numbers(e); ne != nil {
				ne.Pointer = "/" + pointerToken(k) + ne.Pointer
				return ne
			}
		}
	case []any:
		for i, e := range t {
			if ne := numbers(e); ne != nil {
				ne.Pointer = "/" + strconv.Itoa(i) + ne.Pointer
				return ne
			}
		}
	}
	return nil
}

func pointerToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// checkSchemaDoc applies the bounds that hold before compilation to a
// decoded schema: nesting, numbers and regular expressions. Any member
// named pattern, and any patternProperties object, counts, wherever it
// sits.
//
// Every object counts as a subschema against maxApplications, which
// refuses, before it is compiled, a schema that could only be refused
// after (compiling costs some 40 µs a subschema).
func checkSchemaDoc(doc any) error {
	var insts, objects int
	var walk func(v any, at string, depth int) error
	walk = func(v any, at string, depth int) error {
		switch t := v.(type) {
		case json.Number:
			if why := numberWhy(t); why != "" {
				return bound(at, "the number %s: a number in a schema has at most %d characters and fits a 64-bit float", why, MaxNumberBytes)
			}
		case map[string]any:
			if objects++; objects > maxApplications {
				return bound(at, "the schema holds more than %d objects", maxApplications)
			}
		}
		switch v.(type) {
		case map[string]any, []any:
			if depth > maxDepth {
				return bound(at, "the schema nests deeper than %d levels", maxDepth)
			}
		}
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				ea := at + "/" + pointerToken(k)
				if s, ok := e.(string); ok && k == "pattern" {
					if err := schemaRegexp(s, ea, &insts); err != nil {
						return err
					}
				}
				if pp, ok := e.(map[string]any); ok && k == "patternProperties" {
					for p := range pp {
						if err := schemaRegexp(p, ea, &insts); err != nil {
							return err
						}
					}
				}
				if err := walk(e, ea, depth+1); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range t {
				if err := walk(e, at+"/"+strconv.Itoa(i), depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(doc, "", 1)
}

// schemaRegexp checks one of a schema's regular expressions and adds its
// program to the schema's total. One that does not parse is left to the
// compiler, which says why.
func schemaRegexp(s, at string, total *int) error {
	n, over, err := regexpSize(s)
	if err != nil {
		return nil
	}
	if over != "" {
		return bound(at, "the regular expression %s", over)
	}
	if *total += n; *total > maxSchemaRegexpInsts {
		return bound(at, "the schema's regular expressions compile to more than %d instructions together", maxSchemaRegexpInsts)
	}
	return nil
}

// regexpSize parses a regular expression as the regexp package does and
// estimates its program; over says which bound it passes, err why it
// does not parse.
func regexpSize(s string) (n int, over string, err error) {
	if len(s) > MaxPatternBytes {
		return 0, fmt.Sprintf("is %d bytes long, more than %d", len(s), MaxPatternBytes), nil
	}
	re, err := syntax.Parse(s, syntax.Perl)
	if err != nil {
		return 0, "", err
	}
	if n = progSize(re); n > maxRegexpInsts {
		return n, fmt.Sprintf("compiles to more than %d instructions (a counted repetition such as {100} repeats what it applies to)", maxRegexpInsts), nil
	}
	return n, "", nil
}

// progSize estimates the instructions re compiles to, as regexp/syntax
// estimates it to refuse huge programs, capped just past maxRegexpInsts.
func progSize(re *syntax.Regexp) int {
	const limit = maxRegexpInsts + 1
	switch re.Op {
	case syntax.OpLiteral:
		return max(1, len(re.Rune))
	case syntax.OpCapture, syntax.OpStar:
		return min(limit, 2+progSize(re.Sub[0]))
	case syntax.OpPlus, syntax.OpQuest:
		return min(limit, 1+progSize(re.Sub[0]))
	case syntax.OpConcat, syntax.OpAlternate:
		n := len(re.Sub)
		for _, sub := range re.Sub {
			n = min(limit, n+progSize(sub))
		}
		return n
	case syntax.OpRepeat:
		sub := progSize(re.Sub[0])
		switch {
		case re.Max == -1 && re.Min == 0:
			return min(limit, 2+sub)
		case re.Max == -1:
			return min(limit, 1+re.Min*sub)
		}
		return min(limit, re.Max*sub+re.Max-re.Min)
	}
	return 1
}

// compileRegexp is the compiler's regular expression engine: the bounds,
// then the regexp package.
func compileRegexp(s string) (jsonschema.Regexp, error) {
	_, over, err := regexpSize(s)
	if err != nil {
		return nil, err
	}
	if over != "" {
		return nil, errors.New("the regular expression " + over)
	}
	return regexp.Compile(s)
}

// validateRegexFormat asserts format "regex" on a value: it parses, within
// the bounds. Nothing is compiled, so a request's strings cost what
// parsing them costs.
func validateRegexFormat(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	_, over, err := regexpSize(s)
	if err != nil {
		return err
	}
	if over != "" {
		return errors.New("the regular expression " + over)
	}
	return nil
}
