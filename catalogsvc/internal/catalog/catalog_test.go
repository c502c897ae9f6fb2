package catalog

import (
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/internal/catalogdata"
	"github.com/agtpsuite/agtp/services/agtp"
)

func TestEmbeddedCatalog(t *testing.T) {
	c, err := Load(catalogdata.Default)
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != catalogdata.DefaultVersion || c.Len() < 400 {
		t.Fatalf("version %s, %d verbs", c.Version, c.Len())
	}
	for _, f := range agtp.FloorMethods() {
		if v, ok := c.Lookup(f); !ok || !v.Floor {
			t.Errorf("floor method %s missing or not flagged", f)
		}
	}
	if c.Legacy["GET"] != "FETCH" || c.Legacy["PATCH"] != "MODIFY" {
		t.Errorf("legacy %v", c.Legacy)
	}
	for _, v := range []string{"BOOK", "RESERVE", "CANCEL", "SEARCH"} {
		if !c.Admits(v) {
			t.Errorf("%s not admitted", v)
		}
	}
	if c.Admits("GET") || c.Admits("FROBNICATE") {
		t.Error("non-catalog verb admitted")
	}
}

// TestDraftShapeAndDeprecation loads the draft's form (version, embedded,
// legacy, verbs as an array, category as a string) with a deprecated and
// a removed verb (AGTP-API §3.1, §4.2, §4.4, §4.5).
func TestDraftShapeAndDeprecation(t *testing.T) {
	doc := `{
	 "version": "2.0.0",
	 "embedded": ["QUERY"],
	 "legacy": [{"name": "GET", "preferred": "FETCH"}],
	 "categories": ["analysis", "retrieval", "mechanics"],
	 "verbs": [
	  {"name": "AUDIT", "category": "analysis", "deprecated_in": "1.2.0", "removed_in": "3.0.0", "successor": "RECORD"},
	  {"name": "RECORD", "categories": ["mechanics"]},
	  {"name": "FETCH", "categories": ["retrieval"]},
	  {"name": "OLDVERB", "categories": ["retrieval"], "deprecated_in": "1.1.0", "removed_in": "2.0.0"},
	  {"name": "AUDIT_LEGACY", "category": "compute"}
	 ]
	}`
	c, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := c.Lookup("AUDIT")
	if !ok || !a.Deprecated() || a.Successor != "RECORD" || a.Categories[0] != "analysis" {
		t.Fatalf("AUDIT = %+v", a)
	}
	if c.Admits("OLDVERB") || c.Removed["OLDVERB"] == nil {
		t.Fatal("a verb removed at or before the catalog version is admitted")
	}
	if c.Admits("AUDIT_LEGACY") || !strings.Contains(strings.Join(c.Warnings, "\n"), "AUDIT_LEGACY") {
		t.Fatalf("AUDIT_LEGACY not skipped with a warning: %v", c.Warnings)
	}
	if !c.Admits("DEPRECATE") {
		t.Fatal("the floor is admitted even when the catalog lists only part of it")
	}
	if c.Legacy["GET"] != "FETCH" {
		t.Fatalf("legacy %v", c.Legacy)
	}
	var custom []string
	for _, m := range c.Proto([]string{"FROB", "AUDIT"}) {
		if m.GetCustom() {
			custom = append(custom, m.GetName())
		}
	}
	if strings.Join(custom, ",") != "FROB" {
		t.Fatalf("custom %v", custom)
	}
}

func TestLoadRefusals(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":       `{`,
		"bad version":    `{"version": "1.0", "verbs": {"BOOK": {}}}`,
		"no verbs":       `{"version": "1.0.0"}`,
		"bad legacy":     `{"version": "1.0.0", "verbs": {"BOOK": {}}, "legacy": {"HEAD": "FETCH"}}`,
		"key/name clash": `{"version": "1.0.0", "verbs": {"BOOK": {"name": "RESERVE"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load([]byte(doc)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestSemver(t *testing.T) {
	a, _ := ParseSemver("1.10.0")
	b, _ := ParseSemver("1.9.3")
	if Compare(a, b) != 1 || Compare(b, a) != -1 || Compare(a, a) != 0 {
		t.Fatal("compare")
	}
	for _, bad := range []string{"1.0", "01.0.0", "1.0.x", "-1.0.0"} {
		if _, err := ParseSemver(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
