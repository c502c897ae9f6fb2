package testkit

import (
	"os"
	"testing"
)

// TestBinaryTempDirIsRemovedAfterTheTests: what BinaryTempDir makes
// outlives the test that asked and is gone once Cleaned's Run returns;
// without Main the test that asks fails instead.
func TestBinaryTempDirIsRemovedAfterTheTests(t *testing.T) {
	outside := &recordingTB{}
	if inMain.Load() {
		t.Fatal("this binary's tests must not run through Main: the test needs a binary without it")
	}
	requireMain(outside)
	if !outside.fatal {
		t.Fatal("BinaryTempDir outside Main did not fail the test")
	}

	var dirs []string
	m := runFunc(func() int {
		for range 2 {
			dir := BinaryTempDir(t, "agtp-testkit-")
			if err := os.WriteFile(dir+"/key.pem", []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, dir)
		}
		return 3
	})
	defer inMain.Store(false)
	if code := Cleaned(m).Run(); code != 3 {
		t.Fatalf("Run = %d, want the tests' own status", code)
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the tests (%v)", dir, err)
		}
	}
}

type runFunc func() int

func (f runFunc) Run() int { return f() }

// recordingTB records a Fatal call instead of ending the test.
type recordingTB struct {
	testing.TB
	fatal bool
}

func (r *recordingTB) Helper()      {}
func (r *recordingTB) Fatal(...any) { r.fatal = true }
