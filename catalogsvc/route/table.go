// Package route makes the AGTP-API structural decision for one request:
// 459 (method), 460 (path grammar), 405 (policy or registry), 404, or the
// matched endpoint with its path parameters, in the order of
// docs/decisions.md#D-decision-order.
//
// A Table is built once from a catalog snapshot (catalogv1.Snapshot) and is
// then immutable, so the front door can swap tables atomically on every
// WatchSnapshot message and call Decide from any number of goroutines. The
// catalog service's ResolveRoute RPC uses the same Table, so there is one
// code path for the decision.
package route

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Endpoint is one routable endpoint of a Table.
type Endpoint struct {
	// Index is the endpoint's position in the snapshot's endpoints, so a
	// caller can keep parallel per-endpoint data (compiled validators,
	// handlers) in a slice and find it without a map lookup.
	Index int
	// Proto is the snapshot's projection of the endpoint; read only.
	Proto *catalogv1.Endpoint
	// Method is the endpoint's method.
	Method string
	// Template is the parsed path.
	Template *Template
	// Tier is the endpoint tier (AGTP-API §6.1).
	Tier catalogv1.EndpointTier
	// Warning is the AGTP-Endpoint-Warning value, empty when the endpoint
	// is not deprecated (AGTP-API §6.5).
	Warning string
}

// methodInfo is what the decision needs to know about one admitted method.
type methodInfo struct {
	floor  bool
	custom bool
	// legacy marks an opted-in legacy verb (AGTP-API §3.6): it is
	// dispatched as target, with action as the legacy mapping's hint.
	legacy bool
	target string
	action string
	// warning is the AGTP-Catalog-Warning value for a deprecated verb.
	warning string
	// denied is set when policies.methods refuses the method (disallow,
	// or outside an allow list); the floor is never denied.
	denied bool
}

type redirect struct {
	fromMethod, fromPath, toMethod, toPath string
	// fromKey and toKey are the paths' exact-match keys (literalKey), so
	// a redirect matches a request path however its segments are
	// percent-encoded, as the endpoint lookup does; fromKey is "" when
	// the redirect applies on every path.
	fromKey, toKey string
	toSegs         []string
}

type leaf struct {
	nparams  int
	byMethod map[string]*Endpoint
}

type node struct {
	lit   map[string]*node
	param *node
	leaf  *leaf
}

// Table is an immutable routing table built from one snapshot.
type Table struct {
	revision       uint64
	catalogVersion string
	methods        map[string]*methodInfo
	aliases        map[string]string
	verbs          VerbSet
	anyRedirect    map[string]*redirect
	pathRedirect   map[string]map[string]*redirect
	redirects      []*redirect
	exact          map[string]*leaf
	root           node
	maxDepth       int
	endpoints      []*Endpoint
}

// legacyMapping is AGTP-API §3.6: how an opted-in legacy verb that no
// alias rewrites is dispatched.
var legacyMapping = map[string][2]string{
	"GET":    {agtp.MethodQuery, ""},
	"POST":   {agtp.MethodExecute, ""},
	"PUT":    {agtp.MethodExecute, "replace"},
	"DELETE": {agtp.MethodExecute, "delete"},
	"PATCH":  {agtp.MethodExecute, "modify"},
}

// LegacyVerbs are the five legacy verbs of AGTP-API §3.1.
var LegacyVerbs = []string{"GET", "POST", "PUT", "DELETE", "PATCH"}

// CatalogWarning renders the AGTP-Catalog-Warning value of AGTP-API §4.4;
// absent parts are left out.
func CatalogWarning(successor, removedIn string) string {
	w := "deprecated"
	if successor != "" {
		w += "; successor=" + successor
	}
	if removedIn != "" {
		w += "; removed_in=" + removedIn
	}
	return w
}

// New builds a Table from a snapshot. It refuses a snapshot that could not
// be routed deterministically: an alias chain, an endpoint on a method the
// snapshot does not admit, a bad path, a duplicate (method, path) or two
// templates that match the same paths with the same parameter count.
func New(s *catalogv1.Snapshot) (*Table, error) {
	if s == nil {
		return nil, errors.New("route: nil snapshot")
	}
	t := &Table{
		revision:       s.GetRevision(),
		catalogVersion: s.GetCatalogVersion(),
		methods:        make(map[string]*methodInfo, len(s.GetMethods())+len(agtp.FloorMethods())),
		aliases:        map[string]string{},
		verbs:          VerbSet{},
		exact:          map[string]*leaf{},
	}
	for _, m := range s.GetMethods() {
		if !agtp.ValidMethodToken(m.GetName()) {
			return nil, fmt.Errorf("route: method %q breaks ^[A-Z]{3,32}$", m.GetName())
		}
		mi := &methodInfo{floor: m.GetFloor() || agtp.IsFloorMethod(m.GetName()), custom: m.GetCustom()}
		if m.GetDeprecatedIn() != "" {
			mi.warning = CatalogWarning(m.GetSuccessor(), m.GetRemovedIn())
		}
		t.methods[m.GetName()] = mi
	}
	// The 18 floor methods are always admitted
	// (docs/decisions.md#D-pinned-catalog).
	for _, f := range agtp.FloorMethods() {
		if mi, ok := t.methods[f]; ok {
			mi.floor = true
			continue
		}
		t.methods[f] = &methodInfo{floor: true}
	}
	pol := s.GetMethodPolicy()
	for _, l := range pol.GetLegacy() {
		names := []string{l}
		if l == "*" {
			names = LegacyVerbs
		}
		for _, n := range names {
			mp, ok := legacyMapping[n]
			if !ok {
				return nil, fmt.Errorf("route: legacy verb %q is not one of GET, POST, PUT, DELETE, PATCH", n)
			}
			if _, dup := t.methods[n]; dup {
				continue
			}
			t.methods[n] = &methodInfo{legacy: true, target: mp[0], action: mp[1]}
		}
	}
	for name := range t.methods {
		t.verbs[name] = struct{}{}
	}
	for from, to := range pol.GetAliases() {
		if !agtp.ValidMethodToken(from) {
			return nil, fmt.Errorf("route: alias %q breaks ^[A-Z]{3,32}$", from)
		}
		if _, chained := pol.GetAliases()[to]; chained {
			return nil, fmt.Errorf("route: alias %s -> %s chains to another alias", from, to)
		}
		if mi := t.methods[to]; mi == nil || mi.legacy {
			return nil, fmt.Errorf("route: alias %s -> %s names a method that is not admitted", from, to)
		}
		t.aliases[from] = to
	}
	// Policy: the floor is mandatory, so neither list can refuse it.
	if allow := pol.GetAllow(); len(allow) > 0 && !slices.Contains(allow, "*") {
		for name, mi := range t.methods {
			if !mi.floor && !slices.Contains(allow, name) {
				mi.denied = true
			}
		}
	}
	for _, name := range pol.GetDisallow() {
		if mi := t.methods[name]; mi != nil && !mi.floor {
			mi.denied = true
		}
	}
	for _, r := range pol.GetRedirects() {
		if err := t.addRedirect(r); err != nil {
			return nil, err
		}
	}
	for i, e := range s.GetEndpoints() {
		if err := t.addEndpoint(i, e); err != nil {
			return nil, err
		}
	}
	if err := t.checkAmbiguity(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Table) addRedirect(r *catalogv1.Redirect) error {
	rd := &redirect{fromMethod: r.GetFromMethod(), fromPath: r.GetFromPath(), toMethod: r.GetToMethod(), toPath: r.GetToPath()}
	if !agtp.ValidMethodToken(rd.fromMethod) {
		return fmt.Errorf("route: redirect from_method %q breaks ^[A-Z]{3,32}$", rd.fromMethod)
	}
	if mi := t.methods[rd.toMethod]; mi == nil || mi.legacy {
		return fmt.Errorf("route: redirect to_method %q is not admitted", rd.toMethod)
	}
	// By position, not by value: from_path and to_path are often the
	// same path (only the method changes), and to_path's segments must be
	// collected once.
	for i, p := range []string{rd.fromPath, rd.toPath} {
		if p == "" {
			continue
		}
		tp, err := ParseTemplate(p, t.verbs)
		if err != nil {
			return fmt.Errorf("route: redirect %s %s: %w", rd.fromMethod, p, err)
		}
		if len(tp.Params) > 0 {
			return fmt.Errorf("route: redirect path %q: redirect paths are literal", p)
		}
		if i == 0 {
			rd.fromKey = literalKey(tp)
			continue
		}
		rd.toKey = literalKey(tp)
		for _, sg := range tp.Segments {
			rd.toSegs = append(rd.toSegs, sg.Literal)
		}
	}
	if rd.fromPath == "" {
		if t.anyRedirect == nil {
			t.anyRedirect = map[string]*redirect{}
		}
		if _, dup := t.anyRedirect[rd.fromMethod]; dup {
			return fmt.Errorf("route: two redirects from %s on every path", rd.fromMethod)
		}
		t.anyRedirect[rd.fromMethod] = rd
	} else {
		if t.pathRedirect == nil {
			t.pathRedirect = map[string]map[string]*redirect{}
		}
		m := t.pathRedirect[rd.fromKey]
		if m == nil {
			m = map[string]*redirect{}
			t.pathRedirect[rd.fromKey] = m
		}
		if _, dup := m[rd.fromMethod]; dup {
			return fmt.Errorf("route: two redirects from %s %s", rd.fromMethod, rd.fromPath)
		}
		m[rd.fromMethod] = rd
	}
	t.redirects = append(t.redirects, rd)
	return nil
}

func (t *Table) addEndpoint(i int, e *catalogv1.Endpoint) error {
	mi := t.methods[e.GetMethod()]
	if mi == nil || mi.legacy {
		return fmt.Errorf("route: endpoint %s %s: method is not admitted by the snapshot", e.GetMethod(), e.GetPath())
	}
	tp, err := ParseTemplate(e.GetPath(), t.verbs)
	if err != nil {
		return fmt.Errorf("route: endpoint %s: %w", e.GetMethod(), err)
	}
	ep := &Endpoint{Index: i, Proto: e, Method: e.GetMethod(), Template: tp, Tier: e.GetTier()}
	if e.GetDeprecated() {
		ep.Warning = e.GetDeprecationMessage()
		if ep.Warning == "" {
			ep.Warning = "deprecated"
		}
	}
	var lf *leaf
	if len(tp.Params) == 0 {
		key := literalKey(tp)
		lf = t.exact[key]
		if lf == nil {
			lf = &leaf{byMethod: map[string]*Endpoint{}}
			t.exact[key] = lf
		}
	} else {
		nd := &t.root
		for _, sg := range tp.Segments {
			if sg.IsParam() {
				if nd.param == nil {
					nd.param = &node{}
				}
				nd = nd.param
				continue
			}
			if nd.lit == nil {
				nd.lit = map[string]*node{}
			}
			c := nd.lit[sg.Literal]
			if c == nil {
				c = &node{}
				nd.lit[sg.Literal] = c
			}
			nd = c
		}
		if nd.leaf == nil {
			nd.leaf = &leaf{nparams: len(tp.Params), byMethod: map[string]*Endpoint{}}
		}
		lf = nd.leaf
		t.maxDepth = max(t.maxDepth, len(tp.Segments))
	}
	if prev := lf.byMethod[ep.Method]; prev != nil {
		return fmt.Errorf("route: endpoints %s %s and %s %s are the same route", prev.Method, prev.Template.Raw, ep.Method, tp.Raw)
	}
	lf.byMethod[ep.Method] = ep
	t.endpoints = append(t.endpoints, ep)
	return nil
}

// literalKey is the decoded form of a parameter-free path, the key of the
// exact-match map.
func literalKey(tp *Template) string {
	if len(tp.Segments) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, sg := range tp.Segments {
		b.WriteByte('/')
		b.WriteString(sg.Literal)
	}
	return b.String()
}

// checkAmbiguity refuses two template shapes that some request path would
// match with the same parameter count (AGTP-API §5.4): the dispatcher must
// never be left to choose between them.
func (t *Table) checkAmbiguity() error {
	groups := map[[2]int][]*Template{}
	seen := map[string]bool{}
	for _, ep := range t.endpoints {
		tp := ep.Template
		if len(tp.Params) == 0 || seen[tp.Shape] {
			continue
		}
		seen[tp.Shape] = true
		k := [2]int{len(tp.Segments), len(tp.Params)}
		groups[k] = append(groups[k], tp)
	}
	for _, g := range groups {
		for i := 0; i < len(g); i++ {
			for j := i + 1; j < len(g); j++ {
				if compatible(g[i], g[j]) {
					return fmt.Errorf("route: path ambiguity: %s and %s match the same paths with %d parameters", g[i].Raw, g[j].Raw, len(g[i].Params))
				}
			}
		}
	}
	return nil
}

func compatible(a, b *Template) bool {
	for k := range a.Segments {
		x, y := a.Segments[k], b.Segments[k]
		if !x.IsParam() && !y.IsParam() && x.Literal != y.Literal {
			return false
		}
	}
	return true
}

// Revision is the snapshot revision the table was built from.
func (t *Table) Revision() uint64 { return t.revision }

// CatalogVersion is the catalog version the table validates against.
func (t *Table) CatalogVersion() string { return t.catalogVersion }

// Endpoints returns the routable endpoints in snapshot order; read only.
func (t *Table) Endpoints() []*Endpoint { return t.endpoints }

// Verbs returns the set of method names no path segment may equal; read
// only.
func (t *Table) Verbs() VerbSet { return t.verbs }

// Admitted reports whether a method token is admitted as a method of its
// own (catalog, floor, custom or opted-in legacy), before aliasing.
func (t *Table) Admitted(method string) bool { return t.methods[method] != nil }

// Served reports whether requests of a method reach its endpoints: the
// method is admitted and the method policy (allow, disallow) does not
// answer it 405. The floor is always served.
func (t *Table) Served(method string) bool {
	mi := t.methods[method]
	return mi != nil && !mi.legacy && !mi.denied
}

// Endpoint returns the endpoint registered for exactly (method, template
// path), or nil.
func (t *Table) Endpoint(method, path string) *Endpoint {
	for _, ep := range t.endpoints {
		if ep.Method == method && ep.Template.Raw == path {
			return ep
		}
	}
	return nil
}

// sortedMethods returns the methods of the leaves, admitted by policy,
// sorted and without duplicates.
func (t *Table) sortedMethods(leaves []*leaf) []string {
	out := []string{}
	for _, lf := range leaves {
		for m := range lf.byMethod {
			if mi := t.methods[m]; mi != nil && !mi.denied && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}
