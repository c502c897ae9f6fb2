package policy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalogdata"
)

func cat(t *testing.T) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Load(catalogdata.Default)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDefaults: allow "*", legacy "NONE", the five default aliases
// (AGTP-API §9.2).
func TestDefaults(t *testing.T) {
	r, err := Resolve(Methods{}, cat(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Proto.GetAllow(), []string{"*"}) || len(r.Proto.GetLegacy()) != 0 || len(r.Proto.GetAliases()) != 5 || r.Proto.GetAliases()["DELETE"] != "REMOVE" {
		t.Fatalf("%v", r.Proto)
	}
	if r.Manifest["legacy"] != "NONE" || r.Manifest["allow"] != "*" {
		t.Fatalf("%v", r.Manifest)
	}
}

func TestStarOrListJSON(t *testing.T) {
	var m Methods
	if err := json.Unmarshal([]byte(`{"allow":["BOOK"],"legacy":"*","aliases":{}}`), &m); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Allow.List, []string{"BOOK"}) || m.Legacy.Word != "*" || m.Aliases == nil {
		t.Fatalf("%+v", m)
	}
	r, err := Resolve(m, cat(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Proto.GetLegacy()) != 5 || len(r.Proto.GetAliases()) != 0 || r.Manifest["legacy"] != "*" {
		t.Fatalf("%v %v", r.Proto, r.Manifest)
	}
	if err := json.Unmarshal([]byte(`{"allow":3}`), &m); err == nil {
		t.Fatal("allow 3 accepted")
	}
}

func TestHardErrorsAndSkips(t *testing.T) {
	c := cat(t)
	for name, tc := range map[string]struct {
		m    Methods
		rule string
	}{
		"legacy typo":            {Methods{Legacy: List("GET", "FETCH")}, "legacy-value"},
		"legacy word":            {Methods{Legacy: StarOrList{Word: "ALL", set: true}}, "legacy-value"},
		"alias chain":            {Methods{Aliases: map[string]string{"GRAB": "GET", "GET": "FETCH"}}, "alias-chain"},
		"alias shadows a method": {Methods{Aliases: map[string]string{"QUERY": "FETCH"}}, "alias-shadows-method"},
		"alias to nowhere":       {Methods{Aliases: map[string]string{"GRAB": "FROBNICATE"}}, "alias-target"},
		"custom lexical":         {Methods{Custom: []string{"X-NEGOTIATE"}}, "method-lexical"},
		"custom legacy":          {Methods{Custom: []string{"GET"}}, "custom-is-legacy"},
		"redirect template":      {Methods{Redirects: []Redirect{{FromMethod: "BOOK", FromPath: "/r/{id}", ToMethod: "RESERVE"}}}, "redirect-path-literal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Resolve(tc.m, c)
			pe, ok := err.(*Error)
			if !ok || pe.Rule != tc.rule {
				t.Fatalf("err = %v, want rule %s", err, tc.rule)
			}
		})
	}
	// §9.4: entries naming verbs the catalog lacks are skipped, not fatal.
	r, err := Resolve(Methods{
		Allow:     List("BOOK", "GONE"),
		Disallow:  []string{"GONE", "EXECUTE"},
		Redirects: []Redirect{{FromMethod: "GONE", ToMethod: "BOOK"}, {FromMethod: "BOOK", ToMethod: "GONE"}},
	}, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Proto.GetAllow(), []string{"BOOK"}) || len(r.Proto.GetDisallow()) != 0 || len(r.Proto.GetRedirects()) != 0 {
		t.Fatalf("%v", r.Proto)
	}
	if w := strings.Join(r.Warnings, "\n"); strings.Count(w, "skipped") != 5 {
		t.Fatalf("warnings %v", r.Warnings)
	}
}
