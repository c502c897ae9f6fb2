package jcs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/agtpsuite/agtp/services/jcs"
)

// fuzzSeeds are shared by the canonicaliser's fuzz targets: the RFC 8785
// examples, the shapes the suite hashes, and I-JSON refusals.
var fuzzSeeds = []string{
	`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
	`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Dalet","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}`,
	` { "b" : [ 1 , { "z" : 1 , "a" : 2 } ] , "a" : { } , "c" : [ ] } `,
	`[1.0, -0, 0.0, 10e1, 1e2, 1e21, 1e-7, 0.000001, 5e-324, 1.7976931348623157e308]`,
	`{"agent_id":"6f74573fa6a54bc08ba22c506682f9d7b239df9f16f49ab350c511e79035b7df","scope":["documents:query"],"trust_tier":2}`,
	"[\"\u2028\x7f\"]",
	`"\ud800\udc00"`,
	`{"a":1,"\u0061":2}`,
	`["\ud800"]`,
	`[1e400]`,
	`[1e-400]`,
	"[\"\xff\"]",
	`{} {}`,
	``,
}

// FuzzCanonicalize checks what every hash and signature in the suite
// relies on: Parse and Canonicalize agree, the canonical form is a fixed
// point, it is JSON that encoding/json reads to the same value as the
// input, and it is not much larger than the input.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, perr := jcs.Parse(data)
		c, err := jcs.Canonicalize(data)
		if (perr == nil) != (err == nil) {
			t.Fatalf("Parse error %v, Canonicalize error %v", perr, err)
		}
		if err != nil {
			var je *jcs.Error
			if !errors.As(err, &je) || je.Offset < 0 || je.Offset > len(data) {
				t.Fatalf("error %v is not a *jcs.Error with an offset into the input", err)
			}
			return
		}
		// Numbers expand the most: 4 bytes "9e20" become 21.
		if len(c) > 6*len(data) {
			t.Fatalf("canonical form is %d bytes for %d bytes of input", len(c), len(data))
		}
		again, err := jcs.Canonicalize(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical form is not a fixed point:\n %s\n %s, %v", c, again, err)
		}
		appended, err := jcs.Append([]byte("prefix"), v)
		if err != nil || !bytes.Equal(appended[len("prefix"):], c) {
			t.Fatalf("Append of the parsed value differs: %s, %v", appended, err)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form is not JSON: %s", c)
		}
		var std, stdIn any
		if err := json.Unmarshal(c, &std); err != nil {
			t.Fatalf("encoding/json refuses the canonical form %s: %v", c, err)
		}
		if !reflect.DeepEqual(std, v) {
			t.Fatalf("canonical form reads as %#v, the input as %#v", std, v)
		}
		// What jcs accepts is I-JSON, which encoding/json reads the same.
		if err := json.Unmarshal(data, &stdIn); err != nil || !reflect.DeepEqual(stdIn, v) {
			t.Fatalf("encoding/json reads the input as %#v, %v; jcs as %#v", stdIn, err, v)
		}
	})
}

// FuzzParseObject checks that ParseObject is Parse restricted to objects,
// and that dropping a member (as the Agent-ID and signature inputs do)
// leaves a value that still encodes and parses back to itself.
func FuzzParseObject(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), "a")
	}
	f.Add([]byte(`{"agent_id":"x","signature":"y","owner":"z"}`), "signature")
	f.Fuzz(func(t *testing.T, data []byte, drop string) {
		m, err := jcs.ParseObject(data)
		v, perr := jcs.Parse(data)
		if err != nil {
			if perr == nil {
				if _, isObj := v.(map[string]any); isObj {
					t.Fatalf("ParseObject refused an object Parse accepts: %v", err)
				}
			}
			return
		}
		if perr != nil || !reflect.DeepEqual(v, any(m)) {
			t.Fatalf("ParseObject and Parse disagree: %v", perr)
		}
		delete(m, drop)
		b, err := jcs.Append(nil, m)
		if err != nil {
			t.Fatalf("a parsed object with a member removed does not encode: %v", err)
		}
		back, err := jcs.ParseObject(b)
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("%s parses to %#v, %v; want %#v", b, back, err, m)
		}
	})
}
