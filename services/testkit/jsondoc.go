package testkit

import (
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agtpsuite/agtp/services/jsondoc"
)

// JSONValue is the JSON text s as a google.protobuf.Value; it panics
// when s is not one (a test's literal).
func JSONValue(s string) *structpb.Value {
	v, err := jsondoc.Value([]byte(s))
	if err != nil || v == nil {
		panic("testkit.JSONValue: " + s + " is not a JSON value")
	}
	return v
}

// ValueJSON is v's JSON encoding as the services store it (compact,
// members in name order), nil for an unset v.
func ValueJSON(v *structpb.Value) []byte {
	b, _ := jsondoc.PreferValue(v, nil)
	return b
}
