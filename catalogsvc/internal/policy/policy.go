// Package policy resolves the manifest's policies.methods block (AGTP-API
// §9) against a loaded catalog: allow, disallow, legacy, aliases,
// redirects, and the server's custom methods (§3.3).
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Methods is the operator's policies.methods block as configured.
type Methods struct {
	// Allow is "*" (the default) or a list of methods; a list admits the
	// listed methods plus the floor.
	Allow StarOrList `json:"allow,omitzero"`
	// Disallow lists methods refused with 405 whatever Allow says.
	Disallow []string `json:"disallow,omitempty"`
	// Legacy is "NONE" (the default), "*" or a list of legacy verbs.
	Legacy StarOrList `json:"legacy,omitzero"`
	// Aliases maps alias to canonical method. nil means the default seed
	// (the five legacy verbs to their preferred replacements); an empty
	// map turns aliasing off.
	Aliases map[string]string `json:"aliases,omitempty"`
	// Redirects rewrite a method (optionally on one path) to another.
	Redirects []Redirect `json:"redirects,omitempty"`
	// Custom declares server-specific methods outside the catalog
	// (AGTP-API §3.3 leaves the declaration's form open; this is it).
	Custom []string `json:"custom,omitempty"`
}

// Redirect is one redirects entry.
type Redirect struct {
	FromMethod string `json:"from_method"`
	FromPath   string `json:"from_path,omitempty"`
	ToMethod   string `json:"to_method"`
	ToPath     string `json:"to_path,omitempty"`
}

// StarOrList is a policy value that is either a single string ("*",
// "NONE") or an array of method names.
type StarOrList struct {
	Word string
	List []string
	set  bool
}

// Star is "*".
func Star() StarOrList { return StarOrList{Word: "*", set: true} }

// List is an explicit list.
func List(names ...string) StarOrList { return StarOrList{List: names, set: true} }

// IsZero reports an unset value.
func (s StarOrList) IsZero() bool { return !s.set && s.Word == "" && s.List == nil }

// UnmarshalJSON accepts a string or an array of strings.
func (s *StarOrList) UnmarshalJSON(b []byte) error {
	s.set = true
	if json.Unmarshal(b, &s.Word) == nil {
		return nil
	}
	s.Word = ""
	if err := json.Unmarshal(b, &s.List); err != nil {
		return errors.New("must be a string or an array of strings")
	}
	if s.List == nil {
		s.List = []string{}
	}
	return nil
}

// MarshalJSON writes the word or the list.
func (s StarOrList) MarshalJSON() ([]byte, error) {
	if s.Word != "" {
		return json.Marshal(s.Word)
	}
	if s.List == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(s.List)
}

// Resolved is a policy checked against a catalog.
type Resolved struct {
	// Proto is the snapshot form: allow ["*"] or the list, legacy expanded,
	// the effective alias map, redirects and custom methods.
	Proto *catalogv1.MethodPolicy
	// Manifest is the policies.methods block as published (AGTP-API §9.3).
	Manifest map[string]any
	// Custom are the custom methods, sorted.
	Custom []string
	// Warnings are entries skipped under §9.4 graceful-skip semantics.
	Warnings []string
}

// Error is a hard configuration error in the policy; field names the
// member (for example "aliases.GET").
type Error struct {
	Field string
	Rule  string
	Msg   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("policies.methods.%s: %s (%s)", e.Field, e.Msg, e.Rule)
}

// Resolve checks m against the catalog. Entries in allow, disallow and
// redirects that name methods the catalog does not admit are skipped with
// a warning (AGTP-API §9.4); a bad legacy value, a bad alias or a bad
// redirect path is a hard error (§9.2, §9.4).
func Resolve(m Methods, cat *catalog.Catalog) (*Resolved, error) {
	r := &Resolved{Proto: &catalogv1.MethodPolicy{}}
	warn := func(format string, a ...any) { r.Warnings = append(r.Warnings, fmt.Sprintf(format, a...)) }

	// custom
	for _, c := range m.Custom {
		switch {
		case !agtp.ValidMethodToken(c):
			return nil, &Error{"custom", "method-lexical", fmt.Sprintf("%q breaks ^[A-Z]{3,32}$", c)}
		case slices.Contains(route.LegacyVerbs, c):
			return nil, &Error{"custom", "custom-is-legacy", fmt.Sprintf("%s is a legacy verb; opt in through legacy", c)}
		case cat.Admits(c):
			warn("custom method %s is already in catalog %s; it is not custom", c, cat.Version)
		case slices.Contains(r.Custom, c):
		default:
			r.Custom = append(r.Custom, c)
		}
	}
	sort.Strings(r.Custom)
	admitted := func(name string) bool { return cat.Admits(name) || slices.Contains(r.Custom, name) }

	// legacy
	var legacy []string
	switch {
	case m.Legacy.IsZero() || m.Legacy.Word == "NONE":
	case m.Legacy.Word == "*":
		legacy = slices.Clone(route.LegacyVerbs)
	case m.Legacy.Word != "":
		return nil, &Error{"legacy", "legacy-value", fmt.Sprintf("%q is not \"*\", \"NONE\" or a list of GET, POST, PUT, DELETE, PATCH", m.Legacy.Word)}
	default:
		for _, l := range m.Legacy.List {
			if !slices.Contains(route.LegacyVerbs, l) {
				return nil, &Error{"legacy", "legacy-value", fmt.Sprintf("%q is not one of GET, POST, PUT, DELETE, PATCH", l)}
			}
			if !slices.Contains(legacy, l) {
				legacy = append(legacy, l)
			}
		}
	}
	r.Proto.Legacy = legacy

	// aliases
	aliases := map[string]string{}
	if m.Aliases == nil {
		for from, to := range cat.Legacy {
			if !admitted(to) {
				warn("default alias %s -> %s dropped: %s is not in catalog %s", from, to, to, cat.Version)
				continue
			}
			aliases[from] = to
		}
	} else {
		for from, to := range m.Aliases {
			field := "aliases." + from
			switch {
			case !agtp.ValidMethodToken(from):
				return nil, &Error{field, "method-lexical", fmt.Sprintf("alias %q breaks ^[A-Z]{3,32}$", from)}
			case admitted(from):
				return nil, &Error{field, "alias-shadows-method", fmt.Sprintf("%s is itself an admitted method and cannot be an alias", from)}
			case m.Aliases[to] != "":
				return nil, &Error{field, "alias-chain", fmt.Sprintf("alias %s -> %s resolves to another alias; aliases are one hop", from, to)}
			case !admitted(to):
				return nil, &Error{field, "alias-target", fmt.Sprintf("alias target %s is not an admitted method", to)}
			}
			aliases[from] = to
		}
	}
	r.Proto.Aliases = aliases

	// allow
	manifestAllow := any("*")
	switch {
	case m.Allow.IsZero() || m.Allow.Word == "*":
		r.Proto.Allow = []string{"*"}
	case m.Allow.Word != "":
		return nil, &Error{"allow", "allow-value", fmt.Sprintf("%q is not \"*\" or a list of methods", m.Allow.Word)}
	default:
		list := []string{}
		for _, a := range m.Allow.List {
			if !admitted(a) {
				warn("allow entry %s skipped: not a method of catalog %s or a custom method", a, cat.Version)
				continue
			}
			list = append(list, a)
		}
		r.Proto.Allow = list
		manifestAllow = list
		if len(list) == 0 {
			// An emptied list still means "floor only", not "*".
			r.Proto.Allow = []string{agtp.MethodQuery}
		}
	}

	// disallow
	disallow := []string{}
	for _, d := range m.Disallow {
		switch {
		case !admitted(d):
			warn("disallow entry %s skipped: not a method of catalog %s or a custom method", d, cat.Version)
		case agtp.IsFloorMethod(d):
			warn("disallow entry %s skipped: the floor methods are mandatory", d)
		default:
			disallow = append(disallow, d)
		}
	}
	r.Proto.Disallow = disallow

	// redirects
	var redirects []map[string]any
	for i, rd := range m.Redirects {
		field := fmt.Sprintf("redirects[%d]", i)
		if !admitted(rd.FromMethod) {
			warn("%s skipped: from_method %s is not a method of catalog %s", field, rd.FromMethod, cat.Version)
			continue
		}
		if !admitted(rd.ToMethod) {
			warn("%s skipped: to_method %s is not a method of catalog %s", field, rd.ToMethod, cat.Version)
			continue
		}
		for _, p := range []struct{ name, path string }{{"from_path", rd.FromPath}, {"to_path", rd.ToPath}} {
			if p.path == "" {
				continue
			}
			tp, err := route.ParseTemplate(p.path, nil)
			if err != nil {
				return nil, &Error{field + "." + p.name, "path-grammar", err.Error()}
			}
			if len(tp.Params) > 0 {
				return nil, &Error{field + "." + p.name, "redirect-path-literal", "redirect paths are literal paths"}
			}
		}
		r.Proto.Redirects = append(r.Proto.Redirects, &catalogv1.Redirect{FromMethod: rd.FromMethod, FromPath: rd.FromPath, ToMethod: rd.ToMethod, ToPath: rd.ToPath})
		e := map[string]any{"from_method": rd.FromMethod, "to_method": rd.ToMethod}
		if rd.FromPath != "" {
			e["from_path"] = rd.FromPath
		}
		if rd.ToPath != "" {
			e["to_path"] = rd.ToPath
		}
		redirects = append(redirects, e)
	}
	r.Proto.Custom = r.Custom

	var manifestLegacy any = "NONE"
	if len(legacy) == len(route.LegacyVerbs) && m.Legacy.Word == "*" {
		manifestLegacy = "*"
	} else if len(legacy) > 0 {
		manifestLegacy = legacy
	}
	if redirects == nil {
		redirects = []map[string]any{}
	}
	r.Manifest = map[string]any{
		"allow":     manifestAllow,
		"disallow":  disallow,
		"legacy":    manifestLegacy,
		"aliases":   aliases,
		"redirects": redirects,
	}
	return r, nil
}
