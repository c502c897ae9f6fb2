package jcs

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
func TestFormatNumberMatchesRFC8785AppendixB(t *testing.T) {
	cases := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, c := range cases {
		got, err := FormatNumber(math.Float64frombits(c.bits))
		if err != nil {
			t.Fatalf("%#x: %v", c.bits, err)
		}
		if got != c.want {
			t.Errorf("%#x: got %s, want %s", c.bits, got, c.want)
		}
	}
	for _, bits := range []uint64{0x7fffffffffffffff, 0x7ff0000000000000, 0xfff0000000000000} {
		if _, err := FormatNumber(math.Float64frombits(bits)); err == nil {
			t.Errorf("%#x: NaN/Infinity must be refused", bits)
		}
	}
}

func TestCanonicalizeMatchesRFC8785Examples(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{
			// RFC 8785 §3.2.2.
			name: "primitive data types",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			// RFC 8785 §3.2.3: members sorted by UTF-16 code units, so the
			// emoji (a surrogate pair, 0xD83D) sorts before U+FB33.
			name: "sorting of non-ASCII member names",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{
			name: "nested objects sorted at every level, whitespace dropped",
			in:   ` { "b" : [ 1 , { "z" : 1 , "a" : 2 } ] , "a" : { } , "c" : [ ] } `,
			want: `{"a":{},"b":[1,{"a":2,"z":1}],"c":[]}`,
		},
		{
			name: "non-ASCII strings stay literal UTF-8, escapes are decoded",
			in:   `{"name":"Jos\u00e9 M\u00fcller","city":"東京"}`,
			want: `{"city":"東京","name":"José Müller"}`,
		},
		{
			name: "integers written as floats collapse",
			in:   `[1.0, -0, 0.0, 10e1, 1e2]`,
			want: `[1,0,0,100,100]`,
		},
		{
			name: "U+2028 and DEL are not escaped",
			in:   "[\"\u2028\x7f\"]",
			want: "[\"\u2028\x7f\"]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			again, err := Canonicalize(got)
			if err != nil || string(again) != c.want {
				t.Fatalf("canonical form is not a fixed point: %s, %v", again, err)
			}
		})
	}
}

func TestCanonicalizeRefusesNonIJSON(t *testing.T) {
	cases := []struct{ name, in string }{
		{"duplicate member", `{"a":1,"a":2}`},
		{"duplicate member via escape", `{"a":1,"\u0061":2}`},
		{"lone high surrogate", `["\ud800"]`},
		{"lone low surrogate", `["\udc00x"]`},
		{"high surrogate then non-surrogate", `["\ud800\u0041"]`},
		{"invalid UTF-8", "[\"\xff\"]"},
		{"raw control character", "[\"a\nb\"]"},
		{"trailing data", `{} {}`},
		{"trailing comma", `[1,]`},
		{"leading zero", `[01]`},
		{"bare dot", `[1.]`},
		{"number overflow", `[1e400]`},
		{"single quotes", `{'a':1}`},
		{"empty input", ``},
		{"bad literal", `[tru]`},
		{"too deep", strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Canonicalize([]byte(c.in))
			var jerr *Error
			if !errors.As(err, &jerr) {
				t.Fatalf("want *jcs.Error, got %v", err)
			}
		})
	}
}

func TestAppendAcceptsGoValues(t *testing.T) {
	v := map[string]any{
		"i":  int64(-3),
		"u":  uint8(7),
		"f":  float32(0.5),
		"n":  json.Number("1.50"),
		"s":  []any{"x", nil, true},
		"ok": false,
	}
	got, err := Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"f":0.5,"i":-3,"n":1.5,"ok":false,"s":["x",null,true],"u":7}`
	if string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if _, err := Append(nil, struct{}{}); err == nil {
		t.Fatal("a struct must be refused; use Marshal")
	}
	if _, err := Append(nil, "\xff"); err == nil {
		t.Fatal("invalid UTF-8 must be refused")
	}
}

func TestMarshalCanonicalizesStructs(t *testing.T) {
	type doc struct {
		Zeta  string  `json:"zeta"`
		Alpha float64 `json:"alpha"`
		HTML  string  `json:"html"`
	}
	got, err := Marshal(doc{Zeta: "z", Alpha: 1e21, HTML: "<a&b>"})
	if err != nil {
		t.Fatal(err)
	}
	// encoding/json escapes <, > and & as \u003c...; JCS writes them literally.
	want := `{"alpha":1e+21,"html":"<a&b>","zeta":"z"}`
	if string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestParseObjectRefusesNonObjects(t *testing.T) {
	if _, err := ParseObject([]byte(`[1]`)); err == nil {
		t.Fatal("array accepted as object")
	}
	m, err := ParseObject([]byte(`{"a":[1,"b"]}`))
	if err != nil || len(m) != 1 {
		t.Fatalf("got %v, %v", m, err)
	}
}

func BenchmarkCanonicalize(b *testing.B) {
	in := []byte(`{"method":"EXECUTE","parameters":{"action":"orders:create","items":[{"sku":"A-1","qty":2,"price":19.99},{"sku":"B-7","qty":1,"price":5}],"customer":{"name":"José","email":"j@example.com"},"note":"deliver \"fast\""}}`)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}
