package accessref

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated tables in docs/access.md")

const (
	docPath   = "../../docs/access.md"
	beginMark = "<!-- BEGIN GENERATED: go test ./deploy/accessref -update -->\n"
	endMark   = "<!-- END GENERATED -->\n"
)

// TestEveryRPCHasARule: the guard refuses a method its table does not
// name, so a new RPC without a rule would be unreachable; a rule naming a
// method that does not exist is a typo that leaves the real one refused.
func TestEveryRPCHasARule(t *testing.T) {
	for _, p := range Problems() {
		t.Error(p)
	}
}

// TestAccessDocMatchesTheTables keeps docs/access.md equal to the tables.
func TestAccessDocMatchesTheTables(t *testing.T) {
	routes, err := ReadRoutes("../../proto/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Markdown(routes)
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(doc, []byte(beginMark)), bytes.Index(doc, []byte(endMark))
	if begin < 0 || end < begin {
		t.Fatalf("%s has no generated section between %q and %q", docPath, beginMark, endMark)
	}
	got := string(doc[begin+len(beginMark) : end])
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("the access tables in %s are stale: run go test ./deploy/accessref -update", docPath)
	}
	out := append(append(append([]byte{}, doc[:begin+len(beginMark)]...), want...), doc[end:]...)
	if err := os.WriteFile(docPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMarkdownShowsTheRules checks the rendering against rules whose
// outcome is known: a front-door-only RPC, an operator-only one, a read
// RPC, and health's absence (it is not an API of the suite).
func TestMarkdownShowsTheRules(t *testing.T) {
	md := Markdown(map[string]Route{"agtp.audit.v1.AuditService.GetRecord": {Verb: "GET", Path: "/v1/audit/records/{audit_id}"}})
	for _, line := range []string{
		"| `SignAndAppend` | — | frontdoor | — | — |",
		"| `RegisterGenesis` | — | — | yes | — |",
		"| `GetRecord` | `GET /v1/audit/records/{audit_id}` | frontdoor | yes | yes |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("no line %q in\n%s", line, md)
		}
	}
	if strings.Contains(md, "Health") {
		t.Error("the health service is listed")
	}
}
