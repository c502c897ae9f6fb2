package agtp

import (
	"strconv"
	"strings"
)

// Scope is one Authority-Scope token (core Appendix C):
//
//	scope-token   = scope-segment 1*( ":" scope-segment )
//	scope-segment = 1*( ALPHA / DIGIT / "-" / "_" ) / "*"
//
// with at least two segments, the last being the action ("documents:read",
// "mcp:tools:execute"), and lowercase letters only. Obtain one from
// ParseScope so that it is known to be well formed.
type Scope string

// ParseScope checks one scope token. Upper-case letters are refused
// rather than folded: the draft makes tokens lowercase, and folding would
// let two spellings of one grant reach audit logs. Errors are
// *ProtocolError values with status 400 and reason
// invalid-authority-scope.
func ParseScope(s string) (Scope, error) {
	if strings.IndexByte(s, ':') < 0 {
		return "", scopeError(s, "needs at least two segments, domain:action")
	}
	for seg := range strings.SplitSeq(s, ":") {
		if seg == "*" {
			continue
		}
		if seg == "" {
			return "", scopeError(s, "has an empty segment")
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case 'A' <= c && c <= 'Z':
				return "", scopeError(s, "must be lowercase")
			default:
				return "", scopeError(s, "may hold only letters, digits, '-', '_' and a whole-segment '*'")
			}
		}
	}
	return Scope(s), nil
}

func scopeError(token, why string) *ProtocolError {
	return badRequest(ReasonInvalidAuthorityScope, "scope "+strconv.Quote(token)+" "+why, false)
}

// Domain returns the first segment.
func (s Scope) Domain() string {
	d, _, _ := strings.Cut(string(s), ":")
	return d
}

// Action returns the last segment.
func (s Scope) Action() string {
	return string(s[strings.LastIndexByte(string(s), ':')+1:])
}

// Covers reports whether the declared scope s grants the claimed scope c.
// They must have the same number of segments, and each segment of s must
// equal the one of c or be "*", which matches any one segment
// (docs/decisions.md#D-scope-wildcards): "booking:*" covers "booking:hotel"
// but not "booking:hotel:cancel", and "*:query" covers any domain's
// query. A "*" in c is literal, so a claim of "booking:*" needs a
// declared "booking:*" (or "*:*"): a wildcard claim is never granted by
// narrower declarations.
func (s Scope) Covers(c Scope) bool {
	ds, cs := string(s), string(c)
	for {
		dseg, drest, dmore := strings.Cut(ds, ":")
		cseg, crest, cmore := strings.Cut(cs, ":")
		if dseg != "*" && dseg != cseg || dmore != cmore {
			return false
		}
		if !dmore {
			return true
		}
		ds, cs = drest, crest
	}
}

// ScopeSet is a list of scopes, as carried by an Authority-Scope header
// or an identity document's scope array.
type ScopeSet []Scope

// ParseScopes parses an Authority-Scope header value: scope tokens
// separated by commas with any spaces or tabs around them, so
// "a:b,c:d" and "a:b ,  c:d" are the same set. Empty list elements are
// ignored as RFC 9110 §5.6.1 requires, but at least one token must be
// present. Several Authority-Scope field lines form one list: join their
// values with "," first.
func ParseScopes(v string) (ScopeSet, error) {
	var set ScopeSet
	for elem := range strings.SplitSeq(v, ",") {
		elem = trimOWS(elem)
		if elem == "" {
			continue
		}
		s, err := ParseScope(elem)
		if err != nil {
			return nil, err
		}
		set = append(set, s)
	}
	if len(set) == 0 {
		return nil, badRequest(ReasonInvalidAuthorityScope, "Authority-Scope holds no scope token", false)
	}
	return set, nil
}

// ParseScopeList checks the scope tokens of a JSON array, such as an
// identity document's scope or an endpoint's required_scopes.
func ParseScopeList(tokens []string) (ScopeSet, error) {
	set := make(ScopeSet, 0, len(tokens))
	for _, t := range tokens {
		s, err := ParseScope(t)
		if err != nil {
			return nil, err
		}
		set = append(set, s)
	}
	return set, nil
}

// String returns the header form, tokens joined by ", ".
func (set ScopeSet) String() string {
	var b strings.Builder
	for i, s := range set {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(s))
	}
	return b.String()
}

// Covers reports whether some scope in set covers c.
func (set ScopeSet) Covers(c Scope) bool {
	for _, s := range set {
		if s.Covers(c) {
			return true
		}
	}
	return false
}

// CoversAll reports whether set covers every scope in claimed, and if
// not, returns the first one it does not cover (for the 262 explanation).
func (set ScopeSet) CoversAll(claimed ScopeSet) (Scope, bool) {
	for _, c := range claimed {
		if !set.Covers(c) {
			return c, false
		}
	}
	return "", true
}
