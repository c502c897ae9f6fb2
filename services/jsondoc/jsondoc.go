// Package jsondoc moves a JSON document between the two forms the internal
// APIs carry it in (docs/operations.md, "Enums and documents"): a
// google.protobuf.Struct, which REST clients read as a JSON object, or a
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

// Struct is raw, a JSON object, as a Struct; nil when raw is empty (the
// document is absent).
func Struct(raw []byte) (*structpb.Struct, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return s, nil
}

// JSON is s as compact JSON with its members in name order. Numbers are
// doubles in a Struct; whole ones are written without an exponent up to
// 1e21, so integers a JSON document usually holds come back as written.
func JSON(s *structpb.Struct) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s.AsMap()); err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Prefer is the document of a Struct field when it is set, else the first
// release's bytes: how a reader takes a document from a writer of either
// release.
func Prefer(s *structpb.Struct, old []byte) ([]byte, error) {
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
