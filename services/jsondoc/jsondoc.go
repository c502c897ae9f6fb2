// Package jsondoc moves a JSON document between the forms the internal
// APIs carry it in (docs/operations.md, "Enums and documents"): a
// google.protobuf.Struct or Value, which REST clients read as JSON, or a
// string holding the exact bytes where they matter (signed, hashed or
// relayed as they are); and the first release's bytes field beside either.
// A reader takes the new field when it is set and falls back to the old.
package jsondoc

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Value is the JSON value b as a google.protobuf.Value, nil when b is
// empty. A value with no Value form (a number beyond float64) is an
// error.
func Value(b []byte) (*structpb.Value, error) {
	if len(b) == 0 {
		return nil, nil
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("not a JSON value: %w", err)
	}
	return v, nil
}

// Struct is the JSON object b as a google.protobuf.Struct, nil when b is
// empty (the document is absent).
func Struct(b []byte) (*structpb.Struct, error) {
	if len(b) == 0 {
		return nil, nil
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return s, nil
}

// JSON is s as compact JSON with its members in name order.
func JSON(s *structpb.Struct) ([]byte, error) {
	return encode(s.AsMap())
}

// PreferValue is the JSON encoding of v when it is set, else old: how a
// reader takes a document that moved from bytes to a Value.
func PreferValue(v *structpb.Value, old []byte) ([]byte, error) {
	if v == nil {
		return old, nil
	}
	return encode(v.AsInterface())
}

// PreferStruct is PreferValue for a document that is a JSON object.
func PreferStruct(s *structpb.Struct, old []byte) ([]byte, error) {
	if s == nil {
		return old, nil
	}
	return JSON(s)
}

// PreferString is the document of a string field when it is set, else the
// first release's bytes.
func PreferString(s string, old []byte) []byte {
	if s == "" {
		return old
	}
	return []byte(s)
}

// encode writes v compact, with object members in name order and strings
// as written (no HTML escaping): the same bytes for the same document,
// which protojson's deliberately unstable spacing would not give. Numbers
// are doubles in a Struct; whole ones are written without an exponent up
// to 1e21, so the integers a document usually holds come back as written.
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
