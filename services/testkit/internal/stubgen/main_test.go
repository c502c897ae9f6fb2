package main

import (
	"bytes"
	"os"
	"testing"
)

// The committed stubs are what the generator makes of the current protos:
// after `make generate` changes a service, `go generate ./services/testkit`
// must be run too.
func TestCommittedStubsAreCurrent(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../stubs_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("services/testkit/stubs_gen.go is stale: run go generate ./services/testkit")
	}
}
