package agtp

import (
	"strings"
	"testing"
)

func TestHeaderNamesCaseInsensitive(t *testing.T) {
	h := Header{{HeaderAgentID, "a"}, {"X-Foo", "1"}, {"x-foo", "2"}}
	for _, name := range []string{"Agent-ID", "agent-id", "AGENT-ID", "aGeNt-Id"} {
		if got := h.Get(name); got != "a" {
			t.Errorf("Get(%q) = %q", name, got)
		}
	}
	if got := h.Values("X-FOO"); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("Values = %q", got)
	}
	if h.Get("Agent-IDs") != "" || h.Has("Task-ID") {
		t.Error("absent field found")
	}
}

func TestHeaderLookupTellsEmptyFromAbsent(t *testing.T) {
	h := Header{{"X-Empty", ""}}
	if v, ok := h.Lookup("x-empty"); !ok || v != "" {
		t.Errorf("Lookup present-empty = %q, %v", v, ok)
	}
	if _, ok := h.Lookup("X-Absent"); ok {
		t.Error("Lookup absent reported present")
	}
}

func TestHeaderSetAddDel(t *testing.T) {
	var h Header
	h.Add("task-id", "  t1 ")
	h.Add("X-A", "a")
	h.Add("Task-ID", "t2")
	h.Set("TASK-ID", "t3")
	want := Header{{HeaderTaskID, "t3"}, {"X-A", "a"}}
	if !equalHeader(h, want) {
		t.Fatalf("after Set: %q, want %q (first position kept, duplicates gone, canonical name)", h, want)
	}
	h.Set("Server-ID", "s")
	h.Del("x-a")
	want = Header{{HeaderTaskID, "t3"}, {HeaderServerID, "s"}}
	if !equalHeader(h, want) {
		t.Fatalf("after Del: %q, want %q", h, want)
	}
}

func TestHeaderCloneIsIndependent(t *testing.T) {
	h := Header{{"X-A", "1"}}
	c := h.Clone()
	c.Set("X-A", "2")
	if h.Get("X-A") != "1" {
		t.Error("Clone shares storage")
	}
	if Header(nil).Clone() != nil {
		t.Error("Clone of nil should be nil")
	}
}

func TestCanonicalNameCoversEveryKnownField(t *testing.T) {
	for _, name := range knownFields {
		for _, variant := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			if got := CanonicalName(variant); got != name {
				t.Errorf("CanonicalName(%q) = %q, want %q", variant, got, name)
			}
		}
		if len(name) > maxKnownLen {
			t.Errorf("%s is longer than maxKnownLen", name)
		}
	}
	if got := CanonicalName("x-unknown"); got != "x-unknown" {
		t.Errorf("unknown names are kept as given, got %q", got)
	}
	for _, r := range []string{"AGTP-Version", "agtp-method", "AGTP-STATUS", "Principal-ID", "server-agent-id"} {
		if !IsRetired(r) {
			t.Errorf("IsRetired(%q) = false", r)
		}
	}
	if IsRetired(HeaderServerID) {
		t.Error("Server-ID is not retired")
	}
}

func TestSplitPathKeepsEncoding(t *testing.T) {
	tests := []struct {
		path string
		want []string
	}{
		{"", nil},
		{"/", nil},
		{"/a", []string{"a"}},
		{"/a/b%2Fc/", []string{"a", "b%2Fc", ""}},
		{"/orders/{id}", []string{"orders", "{id}"}},
	}
	for _, tt := range tests {
		got := SplitPath(tt.path)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("SplitPath(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestRequestQueryAndClone(t *testing.T) {
	req, err := NewRequest("QUERY", "/a?format=json&x=1")
	if err != nil {
		t.Fatal(err)
	}
	q, err := req.Query()
	if err != nil || q.Get("format") != "json" {
		t.Fatalf("Query = %v, %v", q, err)
	}
	req.Header.Set(HeaderTaskID, "t")
	req.Body = []byte("b")
	c := req.Clone()
	c.Header.Set(HeaderTaskID, "u")
	c.Body[0] = 'c'
	if req.Header.Get(HeaderTaskID) != "t" || string(req.Body) != "b" {
		t.Error("Clone shares storage with the original")
	}
}

func TestPrintableASCII(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "req-1 ~": true, "a\x7f": false, "tab\t": false, "r-\xff": false, "é": false,
	} {
		if got := PrintableASCII(s); got != want {
			t.Errorf("PrintableASCII(%q) = %v, want %v", s, got, want)
		}
	}
}
