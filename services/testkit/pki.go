package testkit

import (
	"sync"
	"testing"

	"github.com/agtpsuite/agtp/services/devpki"
)

var (
	pkiOnce   sync.Once
	pkiLayout devpki.Layout
	pkiErr    error
)

// pkiNames are the identities PKI issues: every service's, and an
// "intruder" issued by the same CA for tests that need a second
// identity (tests that need a foreign CA make their own).
var pkiNames = append(append([]string{}, devpki.ServiceNames...), "intruder")

// PKI returns a development PKI made once per test binary, since key
// generation is the slow part, in a BinaryTempDir: concurrent test
// binaries never share keys, and the keys are removed when the binary's
// tests are done.
//
// A program that is not a test (the load benchmark drives the harness
// with its own testing.TB) gets a PKI of its own on every call, in
// tb.TempDir, removed with it.
func PKI(tb testing.TB) devpki.Layout {
	tb.Helper()
	if !testing.Testing() {
		l, err := devpki.Ensure(tb.TempDir(), pkiNames...)
		if err != nil {
			tb.Fatalf("make PKI: %v", err)
		}
		return l
	}
	requireMain(tb)
	pkiOnce.Do(func() {
		var dir string
		if dir, pkiErr = binaryTempDir("agtp-test-pki-"); pkiErr == nil {
			pkiLayout, pkiErr = devpki.Ensure(dir, pkiNames...)
		}
	})
	if pkiErr != nil {
		tb.Fatalf("make test PKI: %v", pkiErr)
	}
	return pkiLayout
}
