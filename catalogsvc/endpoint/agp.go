package endpoint

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// AGPMapping declares how a stock AGP client's request reaches this
// endpoint (project extension, docs/agp.md "Adapter requests"). AGP's
// query and execute carry an adapter-specific `request` object
// (agp-gateway-protocol §6.2, §6.4) such as {"items": [...],
// "amount_cents": 1395} rather than an AGTP method and path; the business
// declares, per endpoint, which requests are meant for it and how their
// members become its input. Which operation reaches the endpoint follows
// its semantic impact: informational endpoints answer query, the others
// execute.
type AGPMapping struct {
	// Match lists request members that must carry exactly these string
	// values (AGP's echo adapter selects with {"serviceId": "order"});
	// they select the endpoint and are not part of its input.
	Match map[string]string `json:"match,omitempty"`
	// Requires lists request members that must be present (and not null).
	Requires []string `json:"requires,omitempty"`
	// Rename maps a request member to the input member it becomes. The key
	// is a path of member names joined by "." where "[]" after a name
	// means each element of that array ("items[].productId"); the value
	// is the new name of the key's last member ("sku"). Members not named
	// keep their names.
	Rename map[string]string `json:"rename,omitempty"`
	// Ignore lists request members AGP itself reads and the endpoint does
	// not take (amount_cents for the strict policy, AGP §8.4).
	Ignore []string `json:"ignore,omitempty"`
}

// agpKeys are the members of an agp block.
var agpKeys = []string{"match", "requires", "rename", "ignore"}

var (
	agpMemberRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	agpPathRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}(\[\])?(\.[A-Za-z_][A-Za-z0-9_]{0,63}(\[\])?){0,7}$`)
)

// maxAGPRules bounds each list and map of an agp block.
const maxAGPRules = 64

// agp checks the agp block: names are JSON member names, rename keys are
// member paths, a member is matched, ignored or renamed but not two of
// these, and two renames do not produce the same member.
func (c *checker) agp(def *Definition) {
	m := def.AGP
	if m == nil {
		return
	}
	if len(m.Match) > maxAGPRules || len(m.Requires) > maxAGPRules || len(m.Rename) > maxAGPRules || len(m.Ignore) > maxAGPRules {
		c.fail("agp", "too-many", "at most %d entries in each of match, requires, rename and ignore", maxAGPRules)
		return
	}
	role := map[string]string{}
	claim := func(field, name, as string) {
		if !agpMemberRe.MatchString(name) {
			c.fail(field, "member-name", "%q is not a member name", name)
			return
		}
		if prev, dup := role[name]; dup && prev != as {
			c.fail(field, "agp-conflict", "%s is both %s and %s", name, prev, as)
			return
		}
		role[name] = as
	}
	for _, k := range sortedKeys(m.Match) {
		claim("agp.match."+k, k, "matched")
	}
	for i, k := range m.Requires {
		if _, matched := m.Match[k]; matched {
			c.fail(fmt.Sprintf("agp.requires[%d]", i), "agp-conflict", "%s is matched already, so it is required", k)
			continue
		}
		if !agpMemberRe.MatchString(k) {
			c.fail(fmt.Sprintf("agp.requires[%d]", i), "member-name", "%q is not a member name", k)
		}
	}
	for i, k := range m.Ignore {
		claim(fmt.Sprintf("agp.ignore[%d]", i), k, "ignored")
	}
	targets := map[string]string{}
	for _, k := range sortedKeys(m.Rename) {
		field := "agp.rename." + k
		if !agpPathRe.MatchString(k) {
			c.fail(field, "member-path", "%q is not a member path (name, name[], a.b[].c)", k)
			continue
		}
		if !strings.Contains(k, ".") {
			claim(field, strings.TrimSuffix(k, "[]"), "renamed")
		}
		to := m.Rename[k]
		if !agpMemberRe.MatchString(to) {
			c.fail(field, "member-name", "%q is not a member name", to)
			continue
		}
		// The produced member, at its level: the key's parent path and the
		// new name.
		parent := ""
		if i := strings.LastIndex(k, "."); i >= 0 {
			parent = k[:i]
		}
		at := parent + "." + to
		if prev, dup := targets[at]; dup {
			c.fail(field, "agp-conflict", "%s and %s both become %s", prev, k, to)
			continue
		}
		targets[at] = k
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}

// Selects reports whether an AGP request object is meant for the
// endpoint, and how specifically: the number of matched and required
// members (a request meant for several endpoints goes to the most
// specific one).
func (m *AGPMapping) Selects(req map[string]any) (specificity int, ok bool) {
	if m == nil {
		return 0, false
	}
	for k, want := range m.Match {
		if got, isStr := req[k].(string); !isStr || got != want {
			return 0, false
		}
	}
	for _, k := range m.Requires {
		if v, present := req[k]; !present || v == nil {
			return 0, false
		}
	}
	return len(m.Match) + len(m.Requires), true
}

// Input turns an AGP request object into the endpoint's input: matched
// and ignored members dropped, renames applied at every depth, the rest
// kept as they are. Two members that end up with one name are an error
// naming both.
func (m *AGPMapping) Input(req map[string]any) (map[string]any, error) {
	kept := make(map[string]any, len(req))
	for k, v := range req {
		if _, matched := m.Match[k]; !matched && !slices.Contains(m.Ignore, k) {
			kept[k] = v
		}
	}
	out, err := m.rename("", kept)
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}

// rename applies the renames below the member path at ("" for the
// request itself).
func (m *AGPMapping) rename(at string, v any) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := m.rename(at+"[]", e)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		from := make(map[string]string, len(x))
		for _, k := range sortedKeys(x) {
			path := k
			if at != "" {
				path = at + "." + k
			}
			name := k
			if to, ok := m.Rename[path]; ok {
				name = to
			} else if to, ok := m.Rename[path+"[]"]; ok {
				name = to
			}
			if prev, dup := from[name]; dup {
				return nil, fmt.Errorf("request members %s and %s both become input member %s", prev, path, name)
			}
			from[name] = path
			r, err := m.rename(path, x[k])
			if err != nil {
				return nil, err
			}
			out[name] = r
		}
		return out, nil
	}
	return v, nil
}
