package agtp

import (
	"testing"
)

func TestParseScopesWhitespaceInsensitive(t *testing.T) {
	// Assertion 52: "a:b,c:d" and "a:b ,  c:d" are the same claim.
	for _, v := range []string{"a:b,c:d", "a:b ,  c:d", "\ta:b,\tc:d\t", "a:b,,c:d,", ", a:b, c:d"} {
		set, err := ParseScopes(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if set.String() != "a:b, c:d" {
			t.Errorf("%q parsed to %q", v, set.String())
		}
	}
}

func TestParseScopeGrammar(t *testing.T) {
	valid := []string{"documents:read", "mcp:tools:execute", "booking:*", "*:query", "*:*", "a_b-1:x_2", "payments:purchase"}
	for _, s := range valid {
		if _, err := ParseScope(s); err != nil {
			t.Errorf("ParseScope(%q): %v", s, err)
		}
	}
	invalid := []string{"", "documents", ":read", "documents:", "a::b", "Documents:read", "documents:READ",
		"docs:re ad", "docs:r*", "docs:**", "docs.read:x", "dócs:read", "*"}
	for _, s := range invalid {
		_, err := ParseScope(s)
		wantProtocolError(t, err, 400, ReasonInvalidAuthorityScope, false)
	}
	for _, v := range []string{"", " , ", "a:b, c", "a:b;c:d"} {
		_, err := ParseScopes(v)
		wantProtocolError(t, err, 400, ReasonInvalidAuthorityScope, false)
	}
	if _, err := ParseScopeList([]string{"a:b", "C:d"}); err == nil {
		t.Error("ParseScopeList accepted an upper-case token")
	}
	if set, err := ParseScopeList([]string{"a:b", "c:*"}); err != nil || set.String() != "a:b, c:*" {
		t.Errorf("ParseScopeList = %v, %v", set, err)
	}
}

func TestScopeCovers(t *testing.T) {
	tests := []struct {
		declared, claimed string
		want              bool
	}{
		{"booking:hotel", "booking:hotel", true},
		{"booking:hotel", "booking:flight", false},
		{"booking:*", "booking:hotel", true},
		{"booking:*", "booking:hotel:cancel", false}, // '*' is one final segment
		{"booking:*", "calendar:read", false},
		{"*:query", "documents:query", true},
		{"*:query", "documents:read", false},
		{"*:*", "a:b", true},
		{"*:*", "a:b:c", false},
		{"mcp:tools:execute", "mcp:tools:execute", true},
		{"mcp:*:execute", "mcp:tools:execute", true},
		{"mcp:tools:execute", "mcp:tools", false},
		{"booking:hotel", "booking:*", false}, // a wildcard claim needs a wildcard grant
		{"booking:*", "booking:*", true},
		{"booking:hotel", "booking:hotel:x", false},
	}
	for _, tt := range tests {
		d, c := Scope(tt.declared), Scope(tt.claimed)
		if got := d.Covers(c); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", d, c, got, tt.want)
		}
	}
	declared, _ := ParseScopes("documents:read, booking:*")
	claimed, _ := ParseScopes("booking:hotel, documents:read")
	if _, ok := declared.CoversAll(claimed); !ok {
		t.Error("CoversAll: should be covered")
	}
	claimed, _ = ParseScopes("booking:hotel, documents:write")
	if miss, ok := declared.CoversAll(claimed); ok || miss != "documents:write" {
		t.Errorf("CoversAll = %q, %v", miss, ok)
	}
	s := Scope("mcp:tools:execute")
	if s.Domain() != "mcp" || s.Action() != "execute" {
		t.Errorf("Domain %q Action %q", s.Domain(), s.Action())
	}
}
