package bindings_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/handler"
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

// TestReplayable: only settled answers are stored under an
// Idempotency-Key; failures of the moment and of the server are not.
func TestReplayable(t *testing.T) {
	for status, want := range map[int]bool{
		200: true, 201: true, 261: true, 400: true, 404: true, 422: true, 456: true, 262: true,
		401: false, 409: false, 429: false, 500: false, 502: false, 503: false, 504: false,
	} {
		if got := bindings.Replayable(status); got != want {
			t.Errorf("Replayable(%d) = %v, want %v", status, got, want)
		}
	}
}

// TestTransient: a transient failure still reads as its declared error.
func TestTransient(t *testing.T) {
	he := &handler.Error{Name: "upstream_timeout", Status: 504}
	err := fmt.Errorf("call: %w", bindings.Transient(he))
	var got *handler.Error
	if !bindings.IsTransient(err) || !errors.As(err, &got) || got != he {
		t.Fatalf("transient %v, declared %v", bindings.IsTransient(err), got)
	}
	if bindings.IsTransient(he) {
		t.Fatal("a plain declared error is transient")
	}
}
