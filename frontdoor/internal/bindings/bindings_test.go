package bindings_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
)

// AGTP-API §12.3: ${VAR} comes from the environment lookup, and every
// unresolved placeholder is named.
func TestExpand(t *testing.T) {
	env := map[string]string{"TOKEN": "s3cret", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct{ in, out, err string }{
		{"Bearer ${TOKEN}", "Bearer s3cret", ""},
		{"no placeholder $ {x}", "no placeholder $ {x}", ""},
		{"${EMPTY}-${TOKEN}", "-s3cret", ""},
		{"${A} and ${B}", "", "${A}, ${B}"},
		{"${1BAD}", "", "not a variable name"},
	} {
		got, err := bindings.Expand(tc.in, lookup)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.out {
			t.Errorf("%q: %q %v, want %q", tc.in, got, err, tc.out)
		}
	}
	if _, err := bindings.Expand("${TOKEN}", nil); err == nil {
		t.Error("a nil lookup resolved a placeholder")
	}
}

func TestDepth(t *testing.T) {
	ctx := context.Background()
	if bindings.Depth(ctx) != 0 || bindings.Depth(bindings.Deeper(bindings.Deeper(ctx))) != 2 {
		t.Fatal("depth does not count invocations")
	}
}
