package endpoint

import (
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The fan-out of a compiled schema (docs/decisions.md#D-schema-bounds).
// The validator follows every applicator each time it is reached, so a
// chain of $defs each applying the next one twice costs 2^n on any value.
// Seen as a graph whose edges are the applicators, some applying a
// subschema to the same value (allOf, $ref, not, if, ...) and some to a
// member or an item, a compiled schema is refused when
//
//   - a cycle applies subschemas to the same value only, which can never
//     succeed (the validator stops it as an error);
//   - it has more than maxApplications subschemas once every reference is
//     replaced by what it names, each recursion counted once;
//   - a recursion can apply one subschema twice to the same value: from
//     any subschema in it, the edges that stay in it, over all the paths
//     that reach them without stepping into the value, give at most one
//     subschema per member name or item index (a tree whose left and
//     right members refer back to it is fine, allOf: [{$ref: #}, {$ref:
//     #}] under a member is not);
//   - a recursion leads to another one, whose applications would then
//     grow with the depth of the value.
//
// What remains applies each subschema a bounded number of times to each
// value, so validation costs at most about maxApplications times the
// size of the value.

type stepKind uint8

const (
	sameValue stepKind = iota
	toMember
	toItem
	toName    // propertyNames: each member name, as a string
	toContent // contentSchema: the decoded content
)

type edge struct {
	to   int
	kind stepKind
	// name is the member (toMember) or the index (toItem, also in from)
	// the edge applies to; any means every one but except (members) or
	// those below from (items).
	name   string
	any    bool
	except map[string]*jsonschema.Schema
	from   int
	// insts is the program size of a patternProperties edge's regular
	// expression, which is matched against each member name.
	insts int
}

// matches reports whether e applies to the member or item letter ("" is
// one the schema does not name).
func (e *edge) matches(kind stepKind, letter string) bool {
	if e.kind != kind {
		return false
	}
	if !e.any {
		return letter != "" && e.name == letter
	}
	if letter == "" {
		return true
	}
	switch kind {
	case toMember:
		_, skipped := e.except[letter]
		return !skipped
	case toItem:
		i, _ := strconv.Atoi(letter)
		return i >= e.from
	}
	return true
}

type schemaGraph struct {
	nodes []*jsonschema.Schema
	index map[*jsonschema.Schema]int
	adj   [][]edge
	// insts is the program size of each node's pattern, 0 for none.
	insts []int
	// uneval is set when a node uses unevaluatedProperties or
	// unevaluatedItems, which make the validator copy the member names or
	// item indexes of every object or array it applies a subschema to.
	uneval bool
}

func (g *schemaGraph) node(s *jsonschema.Schema) int {
	if i, ok := g.index[s]; ok {
		return i
	}
	g.index[s] = len(g.nodes)
	g.nodes = append(g.nodes, s)
	g.adj = append(g.adj, nil)
	g.insts = append(g.insts, 0)
	return len(g.nodes) - 1
}

func schemaPointer(s *jsonschema.Schema) string {
	if _, frag, ok := strings.Cut(s.Location, "#"); ok {
		if frag == "" {
			return "/"
		}
		return frag
	}
	return s.Location
}

// checkFanOut applies the fan-out bounds to a compiled schema and returns
// its graph, for the work a value costs (work.go). It also replaces the
// format "regex" assertions by validateRegexFormat.
func checkFanOut(root *jsonschema.Schema) (*schemaGraph, error) {
	g := &schemaGraph{index: map[*jsonschema.Schema]int{}}
	g.node(root)
	for i := 0; i < len(g.nodes); i++ {
		s := g.nodes[i]
		if s.Format != nil && s.Format.Name == "regex" {
			s.Format = &jsonschema.Format{Name: "regex", Validate: validateRegexFormat}
		}
		if s.RecursiveRef != nil || (s.DynamicRef != nil && s.DynamicRef.Anchor != "") {
			return nil, bound(schemaPointer(s), "$recursiveRef and $dynamicRef are not accepted: what they apply depends on the path validation took")
		}
		if s.Pattern != nil {
			g.insts[i], _, _ = regexpSize(s.Pattern.String())
		}
		g.uneval = g.uneval || s.UnevaluatedProperties != nil || s.UnevaluatedItems != nil
		g.adj[i] = g.edges(s)
	}
	if err := g.noSameValueCycle(); err != nil {
		return nil, err
	}
	comp, order := g.components()
	members := make([][]int, len(order))
	recursive := make([]bool, len(order))
	for i := range g.nodes {
		members[comp[i]] = append(members[comp[i]], i)
		for _, e := range g.adj[i] {
			if e.to == i {
				recursive[comp[i]] = true
			}
		}
	}
	for c := range order {
		recursive[c] = recursive[c] || len(members[c]) > 1
	}
	// order lists the components sinks first: paths are counted from the
	// root backwards through it, what a recursion leads to forwards.
	paths := make([]int, len(order))
	paths[comp[0]] = 1
	total := 0
	for k := len(order) - 1; k >= 0; k-- {
		c := order[k]
		total = min(maxApplications+1, total+paths[c]*len(members[c]))
		if total > maxApplications {
			return nil, bound("", "the schema applies more than %d subschemas once its references are followed (a $ref reached by several paths counts once per path)", maxApplications)
		}
		for _, i := range members[c] {
			for _, e := range g.adj[i] {
				if d := comp[e.to]; d != c {
					paths[d] = min(maxApplications+1, paths[d]+paths[c])
				}
			}
		}
	}
	leadsToRecursion := make([]bool, len(order))
	for _, c := range order {
		for _, i := range members[c] {
			for _, e := range g.adj[i] {
				if d := comp[e.to]; d != c && (recursive[d] || leadsToRecursion[d]) {
					leadsToRecursion[c] = true
				}
			}
		}
		if recursive[c] && leadsToRecursion[c] {
			return nil, bound(schemaPointer(g.nodes[members[c][0]]), "a recursive reference leads to another recursion: the work would grow with the depth of the value")
		}
	}
	for i := range g.nodes {
		if recursive[comp[i]] {
			if err := g.deterministic(i, comp); err != nil {
				return nil, err
			}
		}
	}
	return g, nil
}

func (g *schemaGraph) edges(s *jsonschema.Schema) []edge {
	var out []edge
	same := func(subs ...*jsonschema.Schema) {
		for _, sub := range subs {
			if sub != nil {
				out = append(out, edge{to: g.node(sub), kind: sameValue})
			}
		}
	}
	add := func(sub *jsonschema.Schema, e edge) {
		if sub != nil {
			e.to = g.node(sub)
			out = append(out, e)
		}
	}
	same(s.Ref, s.Not, s.If, s.Then, s.Else)
	if s.DynamicRef != nil {
		same(s.DynamicRef.Ref)
	}
	same(s.AllOf...)
	same(s.AnyOf...)
	same(s.OneOf...)
	for _, sub := range s.DependentSchemas {
		same(sub)
	}
	for _, d := range s.Dependencies {
		if sub, ok := d.(*jsonschema.Schema); ok {
			same(sub)
		}
	}
	add(s.PropertyNames, edge{kind: toName, any: true})
	for name, sub := range s.Properties {
		add(sub, edge{kind: toMember, name: name})
	}
	for re, sub := range s.PatternProperties {
		n, _, _ := regexpSize(re.String())
		add(sub, edge{kind: toMember, any: true, insts: n})
	}
	if sub, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		add(sub, edge{kind: toMember, any: true, except: s.Properties})
	}
	add(s.UnevaluatedProperties, edge{kind: toMember, any: true})
	add(s.Contains, edge{kind: toItem, any: true})
	tuple := 0
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		add(items, edge{kind: toItem, any: true})
	case []*jsonschema.Schema:
		tuple = len(items)
		for i, sub := range items {
			add(sub, edge{kind: toItem, name: strconv.Itoa(i), from: i})
		}
	}
	if sub, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		add(sub, edge{kind: toItem, any: true, from: tuple})
	}
	for i, sub := range s.PrefixItems {
		add(sub, edge{kind: toItem, name: strconv.Itoa(i), from: i})
	}
	add(s.Items2020, edge{kind: toItem, any: true, from: len(s.PrefixItems)})
	add(s.UnevaluatedItems, edge{kind: toItem, any: true})
	add(s.ContentSchema, edge{kind: toContent, any: true})
	return out
}

// noSameValueCycle refuses a cycle of applicators that never step into
// the value.
func (g *schemaGraph) noSameValueCycle() error {
	const (
		unseen = iota
		open
		done
	)
	state := make([]uint8, len(g.nodes))
	var visit func(i int) error
	visit = func(i int) error {
		state[i] = open
		for _, e := range g.adj[i] {
			if e.kind != sameValue {
				continue
			}
			switch state[e.to] {
			case open:
				return bound(schemaPointer(g.nodes[e.to]), "a reference cycle applies this schema to the same value again without stepping into it (into a member or an item)")
			case unseen:
				if err := visit(e.to); err != nil {
					return err
				}
			}
		}
		state[i] = done
		return nil
	}
	for i := range g.nodes {
		if state[i] == unseen {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// components finds the strongly connected components (Tarjan): comp maps
// a node to its component, order lists the components sinks first.
func (g *schemaGraph) components() (comp, order []int) {
	n := len(g.nodes)
	comp = make([]int, n)
	idx := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range idx {
		idx[i] = -1
	}
	var stack []int
	next := 0
	var connect func(v int)
	connect = func(v int) {
		idx[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, e := range g.adj[v] {
			switch {
			case idx[e.to] < 0:
				connect(e.to)
				low[v] = min(low[v], low[e.to])
			case onStack[e.to]:
				low[v] = min(low[v], idx[e.to])
			}
		}
		if low[v] == idx[v] {
			c := len(order)
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = c
				if w == v {
					break
				}
			}
			order = append(order, c)
		}
	}
	for v := range n {
		if idx[v] < 0 {
			connect(v)
		}
	}
	return comp, order
}

// deterministic refuses a recursion that can apply one of its subschemas
// twice to the same value: from q, over every path of same-value edges
// (counted with their multiplicity), the edges that step back into q's
// component must give at most one subschema per member name, item index,
// member name string or content.
func (g *schemaGraph) deterministic(q int, comp []int) error {
	// paths counts the same-value paths from q, capped at 2; the
	// same-value edges form no cycle (noSameValueCycle).
	paths := map[int]int{q: 1}
	var order []int
	seen := map[int]bool{}
	var visit func(i int)
	visit = func(i int) {
		seen[i] = true
		for _, e := range g.adj[i] {
			if e.kind == sameValue && !seen[e.to] {
				visit(e.to)
			}
		}
		order = append(order, i)
	}
	visit(q)
	type step struct {
		e *edge
		n int
	}
	var steps []step
	for k := len(order) - 1; k >= 0; k-- {
		i := order[k]
		for j := range g.adj[i] {
			e := &g.adj[i][j]
			if e.kind == sameValue {
				paths[e.to] = min(2, paths[e.to]+paths[i])
			} else if comp[e.to] == comp[q] {
				steps = append(steps, step{e, paths[i]})
			}
		}
	}
	letters := map[stepKind]map[string]bool{}
	for _, s := range steps {
		if letters[s.e.kind] == nil {
			letters[s.e.kind] = map[string]bool{"": true}
		}
		if !s.e.any {
			letters[s.e.kind][s.e.name] = true
		}
	}
	for kind, names := range letters {
		for letter := range names {
			n := 0
			for _, s := range steps {
				if s.e.matches(kind, letter) {
					n += s.n
				}
			}
			if n > 1 {
				return bound(schemaPointer(g.nodes[q]), "a recursive reference applies a subschema more than once to the same value: the work would double at every level of the value")
			}
		}
	}
	return nil
}
