package testkit

import (
	"os"
	"sync"
	"testing"

	"github.com/agtpsuite/agtp/services/devpki"
)

var (
	pkiOnce   sync.Once
	pkiLayout devpki.Layout
	pkiErr    error
)

// PKI returns a development PKI made once per test binary, since key
// generation is the slow part. Each binary gets its own temporary
// directory, so concurrent test binaries never share keys. The "intruder"
// certificate is issued by the same CA for tests that need a second
// identity; tests that need a foreign CA make their own.
func PKI(tb testing.TB) devpki.Layout {
	tb.Helper()
	pkiOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agtp-test-pki-")
		if err != nil {
			pkiErr = err
			return
		}
		pkiLayout, pkiErr = devpki.Ensure(dir, append(devpki.ServiceNames, "intruder")...)
	})
	if pkiErr != nil {
		tb.Fatalf("make test PKI: %v", pkiErr)
	}
	return pkiLayout
}
