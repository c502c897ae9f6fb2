// Package jsondoc moves JSON documents between the bytes the services
// store and the google.protobuf.Struct and Value fields their APIs carry
// (docs/operations.md, "Enums and documents"): a field that moved from
// bytes is served in both forms, and read from whichever a client of
// either release sent.
package jsondoc

import (
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
// empty.
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

// PreferValue is the JSON encoding of v when it is set, else old: how a
// reader takes a document that moved from bytes to a Value. The encoding
// is compact with object members in name order, the same bytes for the
// same document (protojson's spacing is deliberately unstable).
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
	return encode(s.AsMap())
}

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	return b, nil
}
