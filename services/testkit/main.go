package testkit

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

var (
	// inMain is set while Cleaned's Run runs the binary's tests.
	inMain atomic.Bool

	binaryDirsMu sync.Mutex
	binaryDirs   []string
)

// Main is a TestMain for packages whose tests use what lives as long as
// the test binary (PKI, BinaryTempDir): it runs the tests, removes those,
// and exits with the tests' status.
func Main(m *testing.M) { os.Exit(Cleaned(m).Run()) }

// Cleaned is m whose Run also removes, once the tests are done, what
// lives as long as the test binary; for a TestMain that hands m to
// another runner (goleak.VerifyTestMain).
func Cleaned(m interface{ Run() int }) interface{ Run() int } { return cleaned{m} }

type cleaned struct{ m interface{ Run() int } }

func (c cleaned) Run() int {
	inMain.Store(true)
	code := c.m.Run()
	binaryDirsMu.Lock()
	defer binaryDirsMu.Unlock()
	for _, dir := range binaryDirs {
		if err := os.RemoveAll(dir); err != nil && code == 0 {
			os.Stderr.WriteString("testkit: " + err.Error() + "\n")
			code = 1
		}
	}
	binaryDirs = nil
	return code
}

// BinaryTempDir makes a temporary directory that outlives the test that
// asks for it, for what a test binary makes once and shares between its
// tests (keys, built binaries); Main removes it when the binary's tests
// are done. A test binary whose TestMain is not Main (or does not run
// Cleaned(m)) fails the test that asks, rather than leave the directory
// behind.
func BinaryTempDir(tb testing.TB, pattern string) string {
	tb.Helper()
	requireMain(tb)
	dir, err := binaryTempDir(pattern)
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// requireMain fails the test unless the binary's tests run through Main
// or Cleaned, which remove what lives as long as the binary.
func requireMain(tb testing.TB) {
	tb.Helper()
	if !inMain.Load() {
		tb.Fatal("a directory shared by the whole test binary needs the package's TestMain to be testkit.Main (or to run testkit.Cleaned(m)), which removes it after the tests")
	}
}

func binaryTempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("make a temporary directory: %w", err)
	}
	binaryDirsMu.Lock()
	defer binaryDirsMu.Unlock()
	binaryDirs = append(binaryDirs, dir)
	return dir, nil
}
