package registry

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/route"
)

func TestServiceFileOverridesPolicy(t *testing.T) {
	svc := []byte("policies:\n  methods:\n    allow: [BOOK]\n    disallow: [SEARCH, QUERY, NOSUCHVERB]\n    legacy: [GET]\n    aliases: {}\n    redirects:\n      - {from_method: BOOK, from_path: /room, to_method: RESERVE}\n  anonymous_discovery: false\n")
	d, err := Build(testConfig(t), []File{{"_service.yaml", svc}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Finalize(Version{Counter: 1, Updated: time.Now(), Issued: time.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Snapshot.GetMethodPolicy()
	if !slices.Equal(p.GetAllow(), []string{"BOOK"}) || !slices.Equal(p.GetDisallow(), []string{"SEARCH"}) || !slices.Equal(p.GetLegacy(), []string{"GET"}) || len(p.GetAliases()) != 0 {
		t.Fatalf("policy %v", p)
	}
	joined := strings.Join(d.Warnings(), "\n")
	if !strings.Contains(joined, "QUERY skipped: the floor methods are mandatory") || !strings.Contains(joined, "NOSUCHVERB skipped") {
		t.Fatalf("warnings %v", d.Warnings())
	}
	if st.Snapshot.GetPolicies().GetAnonymousDiscovery() {
		t.Fatal("anonymous_discovery not overridden")
	}
	for _, ep := range st.Snapshot.GetEndpoints() {
		if ep.GetAnonymous() {
			t.Fatalf("%s %s anonymous with anonymous_discovery off", ep.GetMethod(), ep.GetPath())
		}
	}
	if dd := st.Table.Decide("GET", "/"); dd.Outcome == route.MethodViolation {
		t.Fatal("legacy GET not admitted")
	}
}
