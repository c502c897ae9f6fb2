package jsondoc_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agtpsuite/agtp/services/jsondoc"
)

func TestStructAndBackKeepsTheDocument(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"members in name order", `{"b":1,"a":"x"}`, `{"a":"x","b":1}`},
		{"whole numbers without an exponent", `{"n":10485760,"ms":1700000000000}`, `{"ms":1700000000000,"n":10485760}`},
		{"nesting and markup kept", `{"a":{"b":[true,null,"<&>"]}}`, `{"a":{"b":[true,null,"<&>"]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := jsondoc.Struct([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			b, err := jsondoc.JSON(s)
			if err != nil || string(b) != tc.want {
				t.Fatalf("JSON = %s, %v; want %s", b, err, tc.want)
			}
		})
	}
}

func TestStructRefusesWhatIsNoObject(t *testing.T) {
	for _, in := range []string{`[]`, `"x"`, `{`, `1`} {
		if _, err := jsondoc.Struct([]byte(in)); err == nil {
			t.Errorf("Struct(%s) accepted", in)
		}
	}
	if s, err := jsondoc.Struct(nil); s != nil || err != nil {
		t.Errorf("Struct(nil) = %v, %v; want absent", s, err)
	}
}

func TestPreferTakesTheNewFieldThenTheOld(t *testing.T) {
	s, _ := structpb.NewStruct(map[string]any{"new": true})
	for _, tc := range []struct {
		name string
		s    *structpb.Struct
		old  string
		want string
	}{
		{"new set", s, `{"old":true}`, `{"new":true}`},
		{"only old", nil, `{"old":true}`, `{"old":true}`},
		{"neither", nil, ``, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := jsondoc.PreferStruct(tc.s, []byte(tc.old))
			if err != nil || string(b) != tc.want {
				t.Fatalf("PreferStruct = %s, %v; want %s", b, err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ s, old, want string }{
		{`{"new":1}`, `{"old":1}`, `{"new":1}`},
		{``, `{"old":1}`, `{"old":1}`},
	} {
		if got := string(jsondoc.PreferString(tc.s, []byte(tc.old))); got != tc.want {
			t.Errorf("PreferString(%q, %q) = %s, want %s", tc.s, tc.old, got, tc.want)
		}
	}
}
