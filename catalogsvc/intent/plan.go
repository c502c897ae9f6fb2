package intent

import (
	"math"
	"regexp"
	"slices"
	"strings"
)

// Plan is a goal resolved to calls, nothing run (PLAN /, core §7.2).
type Plan struct {
	Goal  string `json:"goal"`
	Steps []Step `json:"steps"`
	// Unmatched are the goal's parts no candidate answers.
	Unmatched []string `json:"unmatched,omitempty"`
}

// Step is one call of a plan: the part of the goal it serves and the
// match that serves it. Inputs are the members the call needs (its
// input schema's required members, path parameters included).
type Step struct {
	Clause string   `json:"clause"`
	Match  Match    `json:"match"`
	Inputs []string `json:"inputs,omitempty"`
}

// MaxClauses bounds the parts a goal is split into.
const MaxClauses = 16

// clauseSep splits a goal into its parts: sentence and list punctuation,
// and the words that chain actions ("and", "then", "after that").
var clauseSep = regexp.MustCompile(`(?i)[.;,!?\n]+|\b(?:and then|after that|afterwards|and|then|finally)\b`)

// Plan splits the goal into its parts, resolves each to its best match
// and returns the calls in the goal's order. Consecutive parts that
// resolve to the same call are one step. When a registered composition or
// pattern makes exactly the calls of the plan, in that order, it replaces
// them: one call the server already knows how to chain. A goal of one
// part is its best match. Nothing is run; the plan is the same for the
// same goal and candidates.
func (ix *Index) Plan(goal string) Plan {
	if len(goal) > MaxIntent {
		goal = goal[:MaxIntent]
	}
	p := Plan{Goal: goal, Steps: []Step{}}
	for _, clause := range clauses(goal) {
		best := ix.bestCall(clause)
		if best == nil {
			p.Unmatched = append(p.Unmatched, clause)
			continue
		}
		if n := len(p.Steps); n > 0 && p.Steps[n-1].Match.Candidate.Key() == best.Candidate.Key() && p.Steps[n-1].Match.Candidate.Name == best.Candidate.Name {
			p.Steps[n-1].Clause += "; " + clause
			continue
		}
		p.Steps = append(p.Steps, Step{Clause: clause, Match: *best, Inputs: best.Candidate.Required})
	}
	if len(p.Steps) > 1 {
		ix.compose(&p)
	}
	return p
}

// bestCall is a clause's top match. Compositions and patterns take part
// here too: a clause may name a composite outright ("summarize order
// ord-1001").
func (ix *Index) bestCall(clause string) *Match {
	ms := ix.Rank(clause, 1)
	if len(ms) == 0 {
		return nil
	}
	return &ms[0]
}

// compose replaces the plan's calls with the composition or pattern whose
// steps are exactly those calls, if one is registered (the first by key
// and name, for determinism).
func (ix *Index) compose(p *Plan) {
	var keys []string
	for _, s := range p.Steps {
		if s.Match.Candidate.Kind != KindEndpoint {
			return
		}
		keys = append(keys, s.Match.Candidate.Key())
	}
	var found *indexed
	for i := range ix.items {
		it := &ix.items[i]
		if it.c.Kind == KindEndpoint || !slices.Equal(it.c.Steps, keys) {
			continue
		}
		if found == nil || it.c.Key()+"\x00"+it.c.Name < found.c.Key()+"\x00"+found.c.Name {
			found = it
		}
	}
	if found == nil {
		return
	}
	var parts []string
	m := Match{Candidate: found.c, Fields: map[string][]string{}}
	for _, s := range p.Steps {
		parts = append(parts, s.Clause)
		m.Score += s.Match.Score
		m.Confidence += s.Match.Confidence / float64(len(p.Steps))
		for _, t := range s.Match.Terms {
			if !slices.Contains(m.Terms, t) {
				m.Terms = append(m.Terms, t)
			}
		}
		for k, v := range s.Match.Fields {
			m.Fields[k] = v
		}
	}
	m.Score = math.Round(m.Score*1e6) / 1e6
	m.Confidence = math.Round(m.Confidence*100) / 100
	p.Steps = []Step{{Clause: strings.Join(parts, "; "), Match: m, Inputs: found.c.Required}}
}

// clauses splits a goal into its non-empty parts, at most MaxClauses (the
// rest joins the last).
func clauses(goal string) []string {
	var out []string
	for _, part := range clauseSep.Split(goal, -1) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if len(analyze(part)) == 0 {
			// Only stop words ("it", "them"): nothing to resolve.
			continue
		}
		out = append(out, part)
	}
	if len(out) > MaxClauses {
		out = append(out[:MaxClauses-1], strings.Join(out[MaxClauses-1:], " "))
	}
	return out
}
