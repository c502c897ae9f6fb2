package server

import (
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
)

func patternRef(p *recipe.Pattern) map[string]any {
	m := map[string]any{"method": p.Method, "recipe_lineage": map[string]any{"recipe_name": p.RecipeName, "recipe_version": p.RecipeVersion}}
	if p.PathExact != "" {
		m["path"] = p.PathExact
	} else {
		m["path_regex"] = p.PathRegex
	}
	if p.Description != "" {
		m["description"] = p.Description
	}
	return m
}

// patternCounter is a counter-proposal: the pattern's own endpoint, which
// the agent can PROPOSE as it is on its next turn.
func patternCounter(p *recipe.Pattern) map[string]any {
	m := patternRef(p)
	if p.PathExact != "" {
		def := p.Definition(p.PathExact, p.RequiredScopes)
		delete(def, "handler")
		m["endpoint"] = def
	}
	return m
}

// counter picks a counter-proposal among the patterns the caller could
// be granted (AGTP-API §10.6: a related endpoint the server would accept)
// and lists registered endpoints near the proposed path (it "SHOULD
// reference manifest entries with a similar capability").
func (s *Server) counter(ev *evaluation, method, path string, t *route.Template) (map[string]any, []map[string]any) {
	first := ""
	if t != nil {
		for _, seg := range t.Segments {
			if !seg.IsParam() {
				first = seg.Literal
				break
			}
		}
	}
	firstOfPath := func(p string) string {
		for _, seg := range agtp.SplitPath(p) {
			if !strings.HasPrefix(seg, "{") {
				return seg
			}
		}
		return ""
	}
	var best *recipe.Pattern
	bestScore := 0
	for _, pat := range s.pats.Load().list {
		if pat.MinTrustTier > 0 && !tierPasses(ev.caller.GetTrustTier(), pat.MinTrustTier) {
			continue
		}
		if ev.st.data != nil && !allIn(pat.DataClasses, ev.st.data) {
			continue
		}
		if composable(ev.st, pat) != "" {
			continue
		}
		score := 0
		if pat.Method == method {
			score++
		}
		if first != "" && firstOfPath(pat.Path()) == first {
			score += 2
		}
		if score > bestScore {
			best, bestScore = pat, score
		}
	}
	var counter map[string]any
	if best != nil {
		counter = patternCounter(best)
	}
	var similar []map[string]any
	if first != "" {
		for _, e := range ev.st.table.Endpoints() {
			if e.Tier == catalogv1.EndpointTier_ENDPOINT_TIER_B && firstOfPath(e.Template.Raw) == first {
				similar = append(similar, map[string]any{"method": e.Method, "path": e.Template.Raw, "description": e.Proto.GetDescription()})
				if len(similar) == 5 {
					break
				}
			}
		}
	}
	return counter, similar
}

func withCounter(counter map[string]any, similar []map[string]any) map[string]any {
	extra := map[string]any{}
	if counter != nil {
		extra["counter_proposal"] = counter
	}
	if len(similar) > 0 {
		extra["similar_endpoints"] = similar
	}
	return extra
}

func allIn(classes []string, data map[string]dataClass) bool {
	for _, c := range classes {
		if _, ok := data[c]; !ok {
			return false
		}
	}
	return true
}
