// Package intent resolves a natural-language intent to the endpoints a
// caller may use (QUERY / with {"intent": ...}, core §7.2.1) and plans a
// goal as a sequence of endpoint calls (PLAN /, core §7.2), without
// running anything. It is pure: the caller hands in the candidates it may
// use (its visible endpoints, the registered compositions and RCNS
// patterns) and gets back deterministic, explained rankings.
// docs/intent.md describes the ranking, its determinism and tie-breaks.
package intent

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// Kind is what a candidate is.
type Kind string

// Candidate kinds.
const (
	KindEndpoint    Kind = "endpoint"
	KindComposition Kind = "composition"
	KindPattern     Kind = "pattern"
)

// Candidate is one thing an intent can resolve to.
type Candidate struct {
	Kind Kind `json:"kind"`
	// Name is a composition's recipe or a pattern's name ("" for an
	// endpoint).
	Name        string `json:"name,omitempty"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	Description string `json:"description,omitempty"`
	// The semantic block's prose (AGTP-API §7.1).
	Intent     string `json:"intent,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	Capability string `json:"capability,omitempty"`
	Impact     string `json:"impact,omitempty"`
	// Parameters are the input schema's top-level members and the string
	// values their enums allow ("open orders" names QUERY /orders'
	// status); Required the members it requires (path parameters
	// included).
	Parameters     []string `json:"parameters,omitempty"`
	Required       []string `json:"required,omitempty"`
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// Steps are the "METHOD /path" calls a composition or pattern makes.
	Steps []string `json:"steps,omitempty"`
	// Deprecated endpoints lose ties to their successors.
	Deprecated bool `json:"deprecated,omitempty"`
}

// Key is "METHOD /path".
func (c *Candidate) Key() string { return c.Method + " " + c.Path }

// FromEndpoint describes a catalog endpoint as a candidate.
func FromEndpoint(ep *endpoint.Endpoint) Candidate {
	d := ep.Def
	c := Candidate{
		Kind: KindEndpoint, Method: d.Method, Path: d.Path, Description: d.Description,
		Intent: d.Semantic.Intent, Outcome: d.Semantic.Outcome, Capability: d.Semantic.Capability, Impact: d.Semantic.Impact,
		RequiredScopes: slices.Clone(d.RequiredScopes), Deprecated: d.Deprecated != nil,
	}
	if d.Handler.Type == endpoint.HandlerComposition {
		c.Kind, c.Name = KindComposition, d.Handler.Recipe
	}
	c.Parameters, c.Required = schemaMembers(d.InputSchema)
	return c
}

// schemaMembers reads an input schema's top-level property names (with
// their string enum values) and its required list, sorted.
func schemaMembers(raw json.RawMessage) (props, required []string) {
	var s struct {
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return nil, nil
	}
	for k, p := range s.Properties {
		props = append(props, k)
		for _, v := range p.Enum {
			if str, ok := v.(string); ok && !slices.Contains(props, str) {
				props = append(props, str)
			}
		}
	}
	slices.Sort(props)
	required = slices.Clone(s.Required)
	slices.Sort(required)
	return props, required
}

// Field weights: what a term matching in each field is worth. The verb
// and the resource (path) say most about what an endpoint does; the
// semantic intent is written for exactly this; descriptions and outcomes
// repeat them in more words.
var fieldWeights = [...]float64{
	fieldMethod:      3,
	fieldPath:        2,
	fieldIntent:      2,
	fieldDescription: 1,
	fieldOutcome:     1,
	fieldParameters:  1,
	fieldCapability:  0.5,
}

type field int

const (
	fieldMethod field = iota
	fieldPath
	fieldIntent
	fieldDescription
	fieldOutcome
	fieldParameters
	fieldCapability
	numFields
)

// idBonus is added when the intent names one thing (a word with a digit,
// "ord-1001") and the candidate's path addresses one thing (a {param}).
const idBonus = 1.0

// indexed is a candidate with its analysed fields.
type indexed struct {
	c      Candidate
	terms  [numFields]map[string]bool
	params int // path parameters
}

// Index ranks intents against a fixed set of candidates. It is safe for
// concurrent use once built.
type Index struct {
	items []indexed
	// df is in how many candidates each stem appears (any field).
	df map[string]int
}

// MaxCandidates bounds an index.
const MaxCandidates = 10000

// New indexes the candidates (at most MaxCandidates; the rest are left
// out). Their order does not matter: rankings are the same for any order.
func New(cands []Candidate) *Index {
	ps := make([]*Prepared, len(cands))
	for i, c := range cands {
		ps[i] = Prepare(c)
	}
	return NewPrepared(ps)
}

// Prepared is a candidate with its texts analysed. Analysis is most of
// what indexing costs, and a candidate's texts change only with the
// catalog, so a caller that indexes per request prepares each endpoint
// once per catalog snapshot and indexes the prepared ones.
type Prepared struct {
	it indexed
	// stems are the distinct stems of all its fields, for the document
	// frequencies.
	stems []string
}

// Prepare analyses a candidate's texts.
func Prepare(c Candidate) *Prepared {
	it := indexed{c: c, params: strings.Count(c.Path, "{")}
	texts := [numFields]string{
		fieldMethod: c.Method, fieldPath: c.Path, fieldIntent: c.Intent, fieldDescription: c.Description,
		fieldOutcome: c.Outcome, fieldParameters: strings.Join(c.Parameters, " "), fieldCapability: c.Capability,
	}
	p := &Prepared{}
	seen := map[string]bool{}
	for f, text := range texts {
		it.terms[f] = map[string]bool{}
		for _, t := range analyze(text) {
			it.terms[f][t.stem] = true
			if !seen[t.stem] {
				seen[t.stem] = true
				p.stems = append(p.stems, t.stem)
			}
		}
	}
	p.it = it
	return p
}

// Candidate is the prepared candidate.
func (p *Prepared) Candidate() Candidate { return p.it.c }

// WithSteps is the prepared candidate with the calls it makes set (a
// composition's recipe steps); the analysed texts are shared, read only.
func (p *Prepared) WithSteps(steps []string) *Prepared {
	q := *p
	q.it.c.Steps = steps
	return &q
}

// NewPrepared indexes prepared candidates (at most MaxCandidates; the
// rest are left out), in any order, as New does.
func NewPrepared(ps []*Prepared) *Index {
	if len(ps) > MaxCandidates {
		ps = ps[:MaxCandidates]
	}
	ix := &Index{df: map[string]int{}, items: make([]indexed, 0, len(ps))}
	for _, p := range ps {
		for _, s := range p.stems {
			ix.df[s]++
		}
		ix.items = append(ix.items, p.it)
	}
	return ix
}

// Match is one ranked candidate.
type Match struct {
	Candidate Candidate `json:"candidate"`
	// Score is the relevance (higher is better), rounded to 1e-6 so that
	// rankings never depend on floating-point summation order.
	Score float64 `json:"score"`
	// Confidence is the share of the intent's distinct words (stop words
	// aside) the candidate matched, rounded to 0.01: 1 when every word the
	// caller wrote is found in the candidate's texts. It is what a
	// confidence_threshold (core §7.2.1) is compared with.
	Confidence float64 `json:"confidence"`
	// Terms are the intent's words that matched, in the intent's order.
	Terms []string `json:"terms"`
	// Fields names the fields each matched stem was found in.
	Fields map[string][]string `json:"fields"`
}

var fieldNames = [numFields]string{"method", "path", "intent", "description", "outcome", "parameters", "capability"}

// MaxResults bounds a ranking.
const MaxResults = 50

// MaxIntent bounds the intent text read, in bytes.
const MaxIntent = 2048

// Rank scores every candidate against the intent and returns those that
// matched at least one term, best first, at most limit (MaxResults when
// limit is not positive or larger).
//
// A stem's weight is its inverse document frequency over the candidates
// (a word every endpoint shares, like the business's noun, counts for
// little) times the sum of the weights of the fields it appears in; each
// stem of the intent counts once. Ties are broken, in order, by: current
// before deprecated, no side effects before side effects
// (informational first), a single endpoint
// before a composition or pattern, fewer required scopes, then "METHOD
// /path" and name in byte order.
func (ix *Index) Rank(intent string, limit int) []Match {
	if limit <= 0 || limit > MaxResults {
		limit = MaxResults
	}
	q, names := ix.query(intent)
	var out []Match
	for i := range ix.items {
		if m, ok := ix.score(&ix.items[i], q, names); ok {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, compareMatches)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// query analyses an intent: its distinct stems in order, the first
// surface word of each, and whether it names one thing.
type query struct {
	stems []string
	id    bool
}

func (ix *Index) query(intent string) (query, map[string]string) {
	if len(intent) > MaxIntent {
		intent = intent[:MaxIntent]
	}
	var q query
	words := map[string]string{}
	for _, t := range analyze(intent) {
		if t.id {
			q.id = true
			continue
		}
		if _, dup := words[t.stem]; dup {
			continue
		}
		words[t.stem] = t.word
		q.stems = append(q.stems, t.stem)
	}
	return q, words
}

func (ix *Index) idf(stem string) float64 {
	n := float64(len(ix.items))
	df := float64(ix.df[stem])
	return math.Log(1 + (n-df+0.5)/(df+0.5))
}

func (ix *Index) score(it *indexed, q query, words map[string]string) (Match, bool) {
	m := Match{Candidate: it.c, Fields: map[string][]string{}}
	var total float64
	for _, s := range q.stems {
		var w float64
		var in []string
		for f := range numFields {
			if it.terms[f][s] {
				w += fieldWeights[f]
				in = append(in, fieldNames[f])
			}
		}
		if w == 0 {
			continue
		}
		total += ix.idf(s) * w
		m.Terms = append(m.Terms, words[s])
		m.Fields[s] = in
	}
	if len(m.Terms) == 0 {
		return Match{}, false
	}
	if q.id && it.params > 0 {
		total += idBonus
	}
	m.Score = math.Round(total*1e6) / 1e6
	m.Confidence = math.Round(float64(len(m.Terms))/float64(len(q.stems))*100) / 100
	return m, true
}

func kindRank(k Kind) int {
	if k == KindEndpoint {
		return 0
	}
	return 1
}

func compareMatches(a, b Match) int {
	if c := cmp.Compare(b.Score, a.Score); c != 0 {
		return c
	}
	if a.Candidate.Deprecated != b.Candidate.Deprecated {
		if b.Candidate.Deprecated {
			return -1
		}
		return 1
	}
	ai, bi := a.Candidate.Impact == "informational", b.Candidate.Impact == "informational"
	if ai != bi {
		if ai {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(kindRank(a.Candidate.Kind), kindRank(b.Candidate.Kind)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(a.Candidate.RequiredScopes), len(b.Candidate.RequiredScopes)); c != 0 {
		return c
	}
	if c := strings.Compare(a.Candidate.Key(), b.Candidate.Key()); c != 0 {
		return c
	}
	return strings.Compare(a.Candidate.Name, b.Candidate.Name)
}

// ForEndpoints indexes the endpoints a caller may use, plus any
// compositions or RCNS patterns it may use: what a QUERY / or PLAN /
// built-in calls with the caller's visible endpoints.
func ForEndpoints(eps []*endpoint.Endpoint, composites ...Candidate) *Index {
	cands := make([]Candidate, 0, len(eps)+len(composites))
	for _, ep := range eps {
		cands = append(cands, FromEndpoint(ep))
	}
	return New(append(cands, composites...))
}
