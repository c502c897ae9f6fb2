package pipeline

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestIntentAssertionJTI(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	header := enc(`{"alg":"EdDSA","typ":"JWT"}`)
	jwt := func(claims string) string { return header + "." + enc(claims) + ".c2ln" }
	for _, tc := range []struct {
		name, value, want string
	}{
		{"a JWT with a jti", jwt(`{"jti":"intent-42","sub":"p"}`), "intent-42"},
		{"an unsecured JWT (empty signature) with a jti", header + "." + enc(`{"jti":"x"}`) + ".", "x"},
		{"no header", "", ""},
		{"not three parts", header + "." + enc(`{"jti":"x"}`), ""},
		{"payload not base64url", header + ".!!!.sig", ""},
		{"payload not JSON", header + "." + enc("jti") + ".sig", ""},
		{"no jti", jwt(`{"sub":"p"}`), ""},
		{"numeric jti", jwt(`{"jti":42}`), ""},
		{"empty jti", jwt(`{"jti":""}`), ""},
		{"control character in jti", jwt(`{"jti":"a\nb"}`), ""},
		{"overlong jti", jwt(`{"jti":"` + strings.Repeat("j", 257) + `"}`), ""},
		{"jti at the bound", jwt(`{"jti":"` + strings.Repeat("j", 256) + `"}`), strings.Repeat("j", 256)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := intentAssertionJTI(tc.value); got != tc.want {
				t.Fatalf("intentAssertionJTI = %q, want %q", got, tc.want)
			}
		})
	}
}
