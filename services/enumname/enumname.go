// Package enumname names protobuf enum values the way AGTP bodies and the
// first release's string fields do: the value's name without the enum's
// prefix, in lower case (ESCALATION_STATE_PENDING_REVIEW is
// "pending_review"). It lets a proto field move from a string to an enum
// (docs/operations.md, "Enums and documents") while both spellings are
// served.
package enumname

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Of is v's name, "" for the zero (unspecified) value or a number the
// enum does not declare.
func Of(v protoreflect.Enum) string {
	if v == nil || v.Number() == 0 {
		return ""
	}
	d := v.Descriptor()
	ev := d.Values().ByNumber(v.Number())
	if ev == nil {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(string(ev.Name()), prefix(d)))
}

// Number is the value of d named name (as Of names it), 0 when d has
// none.
func Number(d protoreflect.EnumDescriptor, name string) protoreflect.EnumNumber {
	if name == "" || name != strings.ToLower(name) {
		return 0
	}
	ev := d.Values().ByName(protoreflect.Name(prefix(d) + strings.ToUpper(name)))
	if ev == nil {
		return 0
	}
	return ev.Number()
}

// Prefer is the name of v when it is set, else old: how a reader takes a
// field that moved from a string to an enum, from a writer of either
// release.
func Prefer(v protoreflect.Enum, old string) string {
	if n := Of(v); n != "" {
		return n
	}
	return old
}

// prefix is what every value name of d starts with: the zero value's
// name without UNSPECIFIED (AIP-126).
func prefix(d protoreflect.EnumDescriptor) string {
	if d.Values().Len() == 0 {
		return ""
	}
	return strings.TrimSuffix(string(d.Values().Get(0).Name()), "UNSPECIFIED")
}

// Enum is a generated protobuf enum type.
type Enum interface {
	~int32
	protoreflect.Enum
}

// Value is the value of enum type E named name (as Of names it), the
// zero value when E has none: what a writer that keeps the name sets the
// enum field to.
func Value[E Enum](name string) E {
	var zero E
	return E(Number(zero.Descriptor(), name))
}

// Requested is how a server reads a request field that moved from a
// string to an enum: the name of v when it is set, else old. A number
// the enum does not declare is named by its digits, which no name
// check accepts, so that it is refused rather than taken for unset.
func Requested(v protoreflect.Enum, old string) string {
	if v == nil || v.Number() == 0 {
		return old
	}
	if n := Of(v); n != "" {
		return n
	}
	return strconv.Itoa(int(v.Number()))
}

// Choices is E's names but the zero value's, comma-separated: what an
// error message offers.
func Choices[E Enum]() string {
	var zero E
	return strings.Join(Names(zero.Descriptor()), ", ")
}

// Refusal is the reason and message that refuse a value of parameter
// param naming none of E's values: <param>-invalid, underscores as
// hyphens (delivery-guarantee-invalid), the same whether the front door
// refuses it (400) or a service does (InvalidArgument).
func Refusal[E Enum](param string) (reason, message string) {
	return strings.ReplaceAll(param, "_", "-") + "-invalid", param + " must be one of " + Choices[E]()
}

// Names lists the names of d's values but the zero value, in number
// order.
func Names(d protoreflect.EnumDescriptor) []string {
	vs := d.Values()
	out := make([]string, 0, vs.Len())
	for i := range vs.Len() {
		if n := vs.Get(i).Number(); n != 0 {
			out = append(out, strings.ToLower(strings.TrimPrefix(string(vs.Get(i).Name()), prefix(d))))
		}
	}
	return out
}
