// Package catalog loads an AGTP-API method catalog document (AGTP-API §3,
// §4): the approved verbs with their categories and deprecation metadata,
// the 18-method floor and the legacy verbs with their preferred
// replacements.
//
// The draft leaves the document's exact shape open (AGTP-API §3.1, §4.2;
// docs/decisions.md#D-catalog-document), so Load accepts both the draft's
// form (version, embedded, legacy, categories, verbs) and the published form
// (catalog_version, embedded_floor, legacy_aliases, categories, methods),
// verbs as a map keyed by name or as an array of objects with "name", and a
// verb's category as "categories" (array) or "category" (string).
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Categories is the taxonomy of AGTP-API §3.1, also the values of an
// endpoint's semantic.capability (§7.1).
var Categories = []string{"discovery", "retrieval", "analysis", "transaction", "modification", "creation", "notification", "mechanics", "domain_spanning"}

// Verb is one catalog entry.
type Verb struct {
	Name         string
	Categories   []string
	Description  string
	DeprecatedIn string
	RemovedIn    string
	Successor    string
	Floor        bool
}

// Deprecated reports whether the verb carries deprecation metadata.
func (v *Verb) Deprecated() bool { return v.DeprecatedIn != "" }

// Catalog is a loaded catalog: the verbs admitted at its version.
type Catalog struct {
	Version    string
	Categories []string
	// Floor is the 18 floor methods; always admitted
	// (docs/decisions.md#D-pinned-catalog).
	Floor []string
	// Legacy maps each legacy verb to its preferred replacement.
	Legacy map[string]string
	// Removed are verbs the document lists with removed_in at or below its
	// own version: they get 459 (AGTP-API §4.5).
	Removed map[string]*Verb
	// Warnings are entries skipped while loading.
	Warnings []string

	verbs map[string]*Verb
}

// defaultLegacy is AGTP-API §3.1's legacy set with its preferred verbs.
var defaultLegacy = map[string]string{"GET": "FETCH", "POST": "CREATE", "PUT": "REPLACE", "DELETE": "REMOVE", "PATCH": "MODIFY"}

type rawVerb struct {
	Name         string          `json:"name"`
	Categories   json.RawMessage `json:"categories"`
	Category     json.RawMessage `json:"category"`
	Description  string          `json:"description"`
	DeprecatedIn string          `json:"deprecated_in"`
	RemovedIn    string          `json:"removed_in"`
	Successor    string          `json:"successor"`
}

type rawDoc struct {
	Version        string          `json:"version"`
	CatalogVersion string          `json:"catalog_version"`
	Embedded       []string        `json:"embedded"`
	EmbeddedFloor  []string        `json:"embedded_floor"`
	Legacy         json.RawMessage `json:"legacy"`
	LegacyAliases  json.RawMessage `json:"legacy_aliases"`
	Categories     []string        `json:"categories"`
	Verbs          json.RawMessage `json:"verbs"`
	Methods        json.RawMessage `json:"methods"`
}

// MaxSize bounds a catalog document (the published one is about 40 KiB).
const MaxSize = 8 << 20

// Load parses and validates a catalog document.
func Load(data []byte) (*Catalog, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("catalog: document is %d bytes, more than %d", len(data), MaxSize)
	}
	var doc rawDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	c := &Catalog{verbs: map[string]*Verb{}, Removed: map[string]*Verb{}, Legacy: map[string]string{}}
	c.Version = firstNonEmpty(doc.CatalogVersion, doc.Version)
	if _, err := ParseSemver(c.Version); err != nil {
		return nil, fmt.Errorf("catalog: version %q: %w", c.Version, err)
	}
	c.Categories = doc.Categories
	if len(c.Categories) == 0 {
		c.Categories = Categories
	}
	rawVerbs := doc.Verbs
	if len(rawVerbs) == 0 {
		rawVerbs = doc.Methods
	}
	entries, err := parseVerbs(rawVerbs)
	if err != nil {
		return nil, fmt.Errorf("catalog: verbs: %w", err)
	}
	cur, _ := ParseSemver(c.Version)
	for _, e := range entries {
		v, warn := c.verb(e)
		if warn != "" {
			c.Warnings = append(c.Warnings, warn)
			continue
		}
		if _, dup := c.verbs[v.Name]; dup {
			return nil, fmt.Errorf("catalog: verb %s is listed twice", v.Name)
		}
		if v.RemovedIn != "" {
			if rv, err := ParseSemver(v.RemovedIn); err == nil && Compare(rv, cur) <= 0 {
				c.Removed[v.Name] = v
				continue
			}
		}
		c.verbs[v.Name] = v
	}
	floor := firstNonEmptySlice(doc.EmbeddedFloor, doc.Embedded)
	for _, f := range floor {
		if !agtp.IsFloorMethod(f) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("embedded verb %s is not one of the 18 floor methods of AGTP core; admitted as a catalog verb", f))
			if _, ok := c.verbs[f]; !ok && agtp.ValidMethodToken(f) {
				c.verbs[f] = &Verb{Name: f}
			}
		}
	}
	c.Floor = agtp.FloorMethods()
	for _, f := range c.Floor {
		v := c.verbs[f]
		if v == nil {
			v = &Verb{Name: f}
			c.verbs[f] = v
		}
		delete(c.Removed, f)
		v.Floor = true
	}
	if err := c.loadLegacy(firstNonEmptyRaw(doc.LegacyAliases, doc.Legacy)); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Catalog) verb(e rawVerb) (*Verb, string) {
	if !agtp.ValidMethodToken(e.Name) {
		return nil, fmt.Sprintf("verb %q skipped: it breaks ^[A-Z]{3,32}$ (AGTP-API §3.2)", e.Name)
	}
	cats, err := stringOrList(e.Categories)
	if err == nil && len(cats) == 0 {
		cats, err = stringOrList(e.Category)
	}
	if err != nil {
		return nil, fmt.Sprintf("verb %s skipped: categories: %v", e.Name, err)
	}
	for _, cat := range cats {
		if !slices.Contains(c.Categories, cat) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("verb %s: category %q is not in the taxonomy", e.Name, cat))
		}
	}
	for _, f := range []struct{ name, v string }{{"deprecated_in", e.DeprecatedIn}, {"removed_in", e.RemovedIn}} {
		if f.v != "" {
			if _, err := ParseSemver(f.v); err != nil {
				return nil, fmt.Sprintf("verb %s skipped: %s %q: %v", e.Name, f.name, f.v, err)
			}
		}
	}
	if e.Successor != "" && !agtp.ValidMethodToken(e.Successor) {
		return nil, fmt.Sprintf("verb %s skipped: successor %q breaks ^[A-Z]{3,32}$", e.Name, e.Successor)
	}
	return &Verb{Name: e.Name, Categories: cats, Description: e.Description, DeprecatedIn: e.DeprecatedIn, RemovedIn: e.RemovedIn, Successor: e.Successor}, ""
}

func (c *Catalog) loadLegacy(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		for k, v := range defaultLegacy {
			c.Legacy[k] = v
		}
		return nil
	}
	// Forms: {"GET":"FETCH"}, {"GET":{"preferred":"FETCH"}}, [{"name":"GET","preferred":"FETCH"}], ["GET"].
	var asMap map[string]json.RawMessage
	if err := json.Unmarshal(raw, &asMap); err == nil {
		for k, v := range asMap {
			var s string
			if json.Unmarshal(v, &s) != nil {
				var o struct {
					Preferred string `json:"preferred"`
				}
				if err := json.Unmarshal(v, &o); err != nil {
					return fmt.Errorf("catalog: legacy %s: %w", k, err)
				}
				s = o.Preferred
			}
			c.Legacy[k] = s
		}
	} else {
		var arr []json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil {
			return fmt.Errorf("catalog: legacy: %w", err)
		}
		for _, a := range arr {
			var s string
			if json.Unmarshal(a, &s) == nil {
				c.Legacy[s] = defaultLegacy[s]
				continue
			}
			var o struct {
				Name      string `json:"name"`
				Preferred string `json:"preferred"`
			}
			if err := json.Unmarshal(a, &o); err != nil {
				return fmt.Errorf("catalog: legacy: %w", err)
			}
			c.Legacy[o.Name] = o.Preferred
		}
	}
	for k := range c.Legacy {
		if _, ok := defaultLegacy[k]; !ok {
			return fmt.Errorf("catalog: legacy verb %q is not one of GET, POST, PUT, DELETE, PATCH", k)
		}
	}
	return nil
}

// Lookup returns an admitted verb (catalog or floor).
func (c *Catalog) Lookup(name string) (*Verb, bool) {
	v, ok := c.verbs[name]
	return v, ok
}

// Admits reports whether name is an admitted catalog or floor verb.
func (c *Catalog) Admits(name string) bool {
	_, ok := c.verbs[name]
	return ok
}

// Verbs returns the admitted verbs sorted by name.
func (c *Catalog) Verbs() []*Verb {
	out := make([]*Verb, 0, len(c.verbs))
	for _, v := range c.verbs {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Len is the number of admitted verbs.
func (c *Catalog) Len() int { return len(c.verbs) }

// Proto returns the admitted verbs as snapshot methods, with the custom
// methods appended.
func (c *Catalog) Proto(custom []string) []*catalogv1.Method {
	var out []*catalogv1.Method
	for _, v := range c.Verbs() {
		out = append(out, &catalogv1.Method{
			Name: v.Name, Categories: v.Categories, Description: v.Description,
			DeprecatedIn: v.DeprecatedIn, RemovedIn: v.RemovedIn, Successor: v.Successor, Floor: v.Floor,
		})
	}
	for _, m := range custom {
		if !c.Admits(m) {
			out = append(out, &catalogv1.Method{Name: m, Custom: true})
		}
	}
	return out
}

func parseVerbs(raw json.RawMessage) ([]rawVerb, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("the document has neither verbs nor methods")
	}
	var asMap map[string]rawVerb
	if err := json.Unmarshal(raw, &asMap); err == nil {
		out := make([]rawVerb, 0, len(asMap))
		for name, v := range asMap {
			if v.Name != "" && v.Name != name {
				return nil, fmt.Errorf("verb key %q names %q", name, v.Name)
			}
			v.Name = name
			out = append(out, v)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out, nil
	}
	var arr []rawVerb
	if err := json.Unmarshal(raw, &arr); err != nil {
		return nil, errors.New("verbs must be an object keyed by verb or an array of objects with name")
	}
	return arr, nil
}

func stringOrList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, errors.New("must be a string or an array of strings")
	}
	return l, nil
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if s != "" {
			return s
		}
	}
	return ""
}

func firstNonEmptySlice(a ...[]string) []string {
	for _, s := range a {
		if len(s) > 0 {
			return s
		}
	}
	return nil
}

func firstNonEmptyRaw(a ...json.RawMessage) json.RawMessage {
	for _, s := range a {
		if len(s) > 0 && string(s) != "null" {
			return s
		}
	}
	return nil
}

// Semver is a parsed MAJOR.MINOR.PATCH.
type Semver [3]int

// ParseSemver parses MAJOR.MINOR.PATCH (no pre-release or build parts;
// the catalog uses none).
func ParseSemver(s string) (Semver, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Semver{}, errors.New("not MAJOR.MINOR.PATCH")
	}
	var v Semver
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || (len(p) > 1 && p[0] == '0') {
			return Semver{}, errors.New("not MAJOR.MINOR.PATCH")
		}
		v[i] = n
	}
	return v, nil
}

// Compare orders two versions.
func Compare(a, b Semver) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
