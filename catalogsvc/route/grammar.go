package route

import (
	"fmt"
	"strings"
)

// Limits of the path grammar. They bound work on paths that a peer
// controls; the drafts set no limits of their own.
const (
	// MaxSegments is the deepest path a template may have. Request paths
	// deeper than this cannot match and are only checked for verb leaks.
	MaxSegments = 32
	// MaxParams is the most template parameters one path may declare.
	MaxParams = 16
	// maxVerbLen is the longest method token (AGTP-API §3.2).
	maxVerbLen = 32
)

// Template is a parsed endpoint path (AGTP-API §5.2, §5.3).
type Template struct {
	// Raw is the path as declared, e.g. /orders/{order_id}.
	Raw string
	// Segments are the path's segments; the root path has none.
	Segments []TemplateSegment
	// Params are the parameter names in order of appearance.
	Params []string
	// Shape is Raw with every parameter written {}: two templates with the
	// same shape match exactly the same request paths.
	Shape string
}

// TemplateSegment is one segment of a template: a literal (percent-decoded)
// or a parameter.
type TemplateSegment struct {
	Literal string
	Param   string
}

// IsParam reports whether the segment is a {param}.
func (s TemplateSegment) IsParam() bool { return s.Param != "" }

// GrammarError is a path that breaks a rule of AGTP-API §5. Rule is a
// lowercase token naming the rule; Segment is the offending segment.
type GrammarError struct {
	Path    string
	Segment string
	Rule    string
	Detail  string
}

func (e *GrammarError) Error() string {
	if e.Segment != "" {
		return fmt.Sprintf("path %q: segment %q: %s (%s)", e.Path, e.Segment, e.Detail, e.Rule)
	}
	return fmt.Sprintf("path %q: %s (%s)", e.Path, e.Detail, e.Rule)
}

// Rules a template or request path can break. The runtime ones double as
// the AGTP reason token of the 460 response.
const (
	RulePathNotAbsolute   = "path-not-absolute"
	RuleTrailingSlash     = "trailing-slash"
	RuleMethodInPath      = "method-name-in-path"
	RulePathMalformed     = "path-malformed"
	RuleEmptySegment      = "empty-segment"
	RuleDotSegment        = "dot-segment"
	RuleQueryInTemplate   = "query-in-template"
	RuleTemplateOperator  = "template-operator-unsupported"
	RuleMixedSegment      = "mixed-segment"
	RuleParamName         = "param-name-invalid"
	RuleDuplicateParam    = "param-duplicate"
	RuleTooDeep           = "path-too-deep"
	RuleTooManyParams     = "too-many-params"
	RuleReservedDiscovery = "reserved-discover-path"
)

// segChar marks the bytes a path segment may hold besides '%'
// (RFC 3986 unreserved, sub-delims, ':' and '@'; AGTP-API §5.2).
var segChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&'()*+,;=:@" {
		t[c] = true
	}
	return t
}()

// NormalizeVerb returns the form in which a path segment is compared with
// method names (AGTP-API §5.1): upper case with every '-' and '_' removed.
// ok is false when the result cannot be a method name at all (it holds a
// byte other than a letter, or is too short or too long), so callers can
// skip the lookup.
func NormalizeVerb(segment string) (norm string, ok bool) {
	var buf [maxVerbLen]byte
	n, ok := normalizeInto(&buf, segment)
	if !ok {
		return "", false
	}
	return string(buf[:n]), true
}

// normalizeInto writes the normalised segment into buf without allocating.
func normalizeInto(buf *[maxVerbLen]byte, s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == '_':
			continue
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		case c >= 'A' && c <= 'Z':
		default:
			return 0, false
		}
		if n == maxVerbLen {
			return 0, false
		}
		buf[n] = c
		n++
	}
	return n, n >= 3
}

// VerbSet answers whether a normalised segment names a method. It is a
// plain set of upper-case method names.
type VerbSet map[string]struct{}

// Leaks reports whether the (already percent-decoded) segment equals a
// method name after normalisation.
func (v VerbSet) Leaks(segment string) bool {
	var buf [maxVerbLen]byte
	n, ok := normalizeInto(&buf, segment)
	if !ok {
		return false
	}
	_, hit := v[string(buf[:n])]
	return hit
}

// unhex decodes one hex digit.
func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// checkSegment validates the characters of a raw request or literal
// segment and reports whether it holds percent-encoding.
func checkSegment(s string) (encoded, ok bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) {
				return false, false
			}
			if _, ok := unhex(s[i+1]); !ok {
				return false, false
			}
			if _, ok := unhex(s[i+2]); !ok {
				return false, false
			}
			encoded = true
			i += 2
			continue
		}
		if !segChar[c] {
			return false, false
		}
	}
	return encoded, true
}

// decodeSegment percent-decodes a segment that checkSegment accepted.
func decodeSegment(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			hi, _ := unhex(s[i+1])
			lo, _ := unhex(s[i+2])
			b = append(b, hi<<4|lo)
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// DecodeSegment validates and percent-decodes one raw path segment.
func DecodeSegment(s string) (string, bool) {
	enc, ok := checkSegment(s)
	if !ok {
		return "", false
	}
	if !enc {
		return s, true
	}
	return decodeSegment(s), true
}

// ParseTemplate parses and validates an endpoint path for registration
// (AGTP-API §5.1–§5.3). verbs is the set of method names no literal
// segment may equal; nil skips that check.
func ParseTemplate(path string, verbs VerbSet) (*Template, error) {
	fail := func(seg, rule, detail string) error {
		return &GrammarError{Path: path, Segment: seg, Rule: rule, Detail: detail}
	}
	if path == "" || path[0] != '/' {
		return nil, fail("", RulePathNotAbsolute, "a path must begin with /")
	}
	for _, op := range []string{"{?", "{#", "{&"} {
		if strings.Contains(path, op) {
			return nil, fail("", RuleTemplateOperator, "only the simple {name} form is supported; RFC 6570 operators are refused")
		}
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fail("", RuleQueryInTemplate, "an endpoint path carries no query string or fragment")
	}
	t := &Template{Raw: path}
	if path == "/" {
		t.Shape = "/"
		return t, nil
	}
	if path[len(path)-1] == '/' {
		return nil, fail("", RuleTrailingSlash, "a path must not end with / unless it is exactly /")
	}
	parts := strings.Split(path[1:], "/")
	if len(parts) > MaxSegments {
		return nil, fail("", RuleTooDeep, fmt.Sprintf("a path has at most %d segments", MaxSegments))
	}
	var shape strings.Builder
	for _, p := range parts {
		shape.WriteByte('/')
		switch {
		case p == "":
			return nil, fail(p, RuleEmptySegment, "empty segments are not registrable")
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") && strings.Count(p, "{") == 1 && strings.Count(p, "}") == 1:
			name := p[1 : len(p)-1]
			if name != "" && strings.ContainsAny(name[:1], "?+#./;&=,*") || strings.ContainsAny(name, ",*:") {
				return nil, fail(p, RuleTemplateOperator, "only the simple {name} form is supported; RFC 6570 operators are refused")
			}
			if !validParamName(name) {
				return nil, fail(p, RuleParamName, "a parameter name is one or more of A-Z, a-z, 0-9 and _")
			}
			for _, q := range t.Params {
				if q == name {
					return nil, fail(p, RuleDuplicateParam, "parameter names must be unique within a path")
				}
			}
			if len(t.Params) == MaxParams {
				return nil, fail(p, RuleTooManyParams, fmt.Sprintf("a path declares at most %d parameters", MaxParams))
			}
			t.Params = append(t.Params, name)
			t.Segments = append(t.Segments, TemplateSegment{Param: name})
			shape.WriteString("{}")
		case strings.ContainsAny(p, "{}"):
			return nil, fail(p, RuleMixedSegment, "a segment is either all literal or exactly one {name}")
		default:
			lit, ok := DecodeSegment(p)
			if !ok {
				return nil, fail(p, RulePathMalformed, "a segment holds a character outside RFC 3986 pchar or a bad percent-encoding")
			}
			if lit == "." || lit == ".." {
				return nil, fail(p, RuleDotSegment, "dot segments are not registrable")
			}
			if verbs != nil && verbs.Leaks(lit) {
				return nil, fail(p, RuleMethodInPath, "a literal segment equals a method name (compared case-insensitively without - and _)")
			}
			t.Segments = append(t.Segments, TemplateSegment{Literal: lit})
			shape.WriteString(p)
		}
	}
	t.Shape = shape.String()
	return t, nil
}

func validParamName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ReservedDiscoverPaths are the DISCOVER built-ins of AGTP-API §5.8 whose
// names are reserved under DISCOVER (§5.9), root excluded.
var ReservedDiscoverPaths = []string{"/methods", "/agents", "/genesis", "/tools", "/apis", "/patterns", "/contracts"}

// ReservedDiscoverConflict returns the reserved name that a DISCOVER path
// would shadow, or "". The rule is a prefix match on the first segment,
// as the examples of AGTP-API §5.9 require (/toolset, /agents-extended,
// /methods/v2), compared case-insensitively so /Methods cannot dodge it,
// and percent-decoded as ParseTemplate registers the literal, so
// /%6Dethods cannot either.
func ReservedDiscoverConflict(path string) string {
	first := strings.TrimPrefix(path, "/")
	if i := strings.IndexByte(first, '/'); i >= 0 {
		first = first[:i]
	}
	if dec, ok := DecodeSegment(first); ok {
		first = dec
	}
	first = strings.ToLower(first)
	for _, r := range ReservedDiscoverPaths {
		if strings.HasPrefix(first, r[1:]) {
			return r
		}
	}
	return ""
}
