package idempotency

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/agtpsuite/agtp/services/jcs"
)

// Fingerprint is the request fingerprint an Idempotency-Key is bound to
// (docs/decisions.md#D-idempotency-key): SHA-256 over the method, the
// request-target (path and query) and the body in RFC 8785 canonical form,
// so that two requests that differ only in JSON whitespace or member order
// are the same request. A body that is not JSON is hashed as received.
func Fingerprint(method, target string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{'\n'})
	h.Write([]byte(target))
	h.Write([]byte{'\n'})
	if len(body) > 0 {
		if canon, err := jcs.Canonicalize(body); err == nil {
			body = canon
		}
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil))
}
