package answer

import (
	"errors"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// DecodeJSON refuses a number longer than 64 characters or beyond a
// 64-bit float, and keeps every other number as it was written.
func TestDecodeJSONNumberBounds(t *testing.T) {
	for _, tc := range []struct {
		in, at string // at is the refused number's pointer; "" for accepted
	}{
		{`{"q":1e999999}`, "/q"},
		{`{"q":-1e309}`, "/q"},
		{`{"q":[1,2,1e-999999]}`, "/q/2"},
		{`{"a/b":` + "1" + strings.Repeat("0", 64) + `}`, "/a~1b"},
		{`1e400`, ""},
		{`{"q":1.7976931348623157e308}`, "-"},
		{`{"q":5e-324}`, "-"},
		{`{"q":0e999999}`, "-"},
		{`{"q":-0.000001}`, "-"},
		{`{"q":` + "1" + strings.Repeat("0", 63) + `}`, "-"},
	} {
		v, err := DecodeJSON([]byte(tc.in))
		if tc.at == "-" {
			if err != nil {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		var ne *endpoint.NumberError
		if !errors.As(err, &ne) || ne.Pointer != tc.at || !strings.HasPrefix(err.Error(), "refused: the number at ") {
			t.Errorf("%s = %v, %v; want a refusal at %q", tc.in, v, err, tc.at)
		}
	}
}
