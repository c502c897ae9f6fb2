package jsondoc

import "testing"

// A document read from bytes is encoded back compactly with members in
// name order; a set Value or Struct is preferred to the old bytes.
func TestRoundTripAndPrefer(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{`{"b":1, "a":[true,null,"x"]}`, `{"a":[true,null,"x"],"b":1}`},
		{`"text"`, `"text"`},
		{`12.5`, `12.5`},
	} {
		v, err := Value([]byte(tc.in))
		if err != nil {
			t.Fatalf("Value(%s): %v", tc.in, err)
		}
		got, err := PreferValue(v, []byte(`"old"`))
		if err != nil || string(got) != tc.want {
			t.Errorf("PreferValue(Value(%s)) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if got, _ := PreferValue(nil, []byte(`"old"`)); string(got) != `"old"` {
		t.Errorf("unset Value: %s, want the old bytes", got)
	}
	s, err := Struct([]byte(`{"k":{"n":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := PreferStruct(s, nil); err != nil || string(got) != `{"k":{"n":2}}` {
		t.Errorf("PreferStruct = %s, %v", got, err)
	}
	if got, _ := PreferStruct(nil, []byte(`{}`)); string(got) != `{}` {
		t.Errorf("unset Struct: %s, want the old bytes", got)
	}
}

// Empty bytes are no document; bytes that are not one, or have no
// Struct or Value form, are errors.
func TestRefusals(t *testing.T) {
	if v, err := Value(nil); v != nil || err != nil {
		t.Errorf("Value(nil) = %v, %v", v, err)
	}
	if s, err := Struct(nil); s != nil || err != nil {
		t.Errorf("Struct(nil) = %v, %v", s, err)
	}
	for _, in := range []string{`{`, `1e400`} {
		if _, err := Value([]byte(in)); err == nil {
			t.Errorf("Value(%s) took it", in)
		}
	}
	if _, err := Struct([]byte(`[1]`)); err == nil {
		t.Error("Struct took an array")
	}
}
