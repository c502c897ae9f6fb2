//go:build goexperiment.jsonv2

package jcs_test

import (
	"bytes"
	"encoding/json/jsontext"
	"errors"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/jcs"
)

// FuzzCanonicalizeMatchesJSONText compares the canonicaliser with the
// standard library's RFC 8785 implementation, which exists only under
// GOEXPERIMENT=jsonv2; without the experiment this file is not built and
// FuzzCanonicalize still checks the canonical form on its own.
//
// The two differ by design in two ways, both refusals on our side: a
// number beyond the double range is an error here (jsontext clamps it to
// ±MaxFloat64, which would hash a value the sender never wrote), and
// nesting is bounded at jcs.MaxDepth rather than 10000.
func FuzzCanonicalizeMatchesJSONText(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ours, err := jcs.Canonicalize(data)
		std := jsontext.Value(bytes.Clone(data))
		stdErr := std.Canonicalize()
		switch {
		case err == nil && stdErr == nil:
			if !bytes.Equal(ours, std) {
				t.Fatalf("canonical forms differ:\n jcs      %s\n jsontext %s", ours, std)
			}
		case err == nil:
			t.Fatalf("jsontext refuses what jcs accepts (%s): %v", ours, stdErr)
		case stdErr == nil:
			var je *jcs.Error
			if !errors.As(err, &je) ||
				!strings.Contains(je.Msg, "not representable as an IEEE 754 double") &&
					!strings.Contains(je.Msg, "nesting deeper than") {
				t.Fatalf("jcs refuses what jsontext accepts (%s): %v", std, err)
			}
		}
	})
}
