package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/testkit"
)

// AIP-158: ListContracts pages a caller's own contracts and, for
// inspect:all, every live contract, in (expiry, synthesis ID) order; a
// token of one caller's listing is refused for another's.
func TestListContractsPages(t *testing.T) {
	e := newEnv(t, envConfig{})
	readerOf := func(agent string) *rcnsv1.Caller { return caller(agent, sessionA, 1, "orders:read") }
	var mine, all []paging.ZPos
	for i := range 7 {
		agent := agentX
		if i%3 == 2 {
			agent = agentY
		}
		r, b := e.propose(readerOf(agent), orderSummary(), "")
		if r.GetStatus() != 263 {
			t.Fatalf("proposal %d: %d %v", i, r.GetStatus(), b)
		}
		c := r.GetContract()
		p := paging.ZPos{Score: float64(c.GetExpiresAt().AsTime().UnixMilli()), Member: c.GetSynthesisId()}
		all = append(all, p)
		if agent == agentX {
			mine = append(mine, p)
		}
	}
	list := func(c *rcnsv1.Caller) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: c, PageSize: size, PageToken: tok})
			var got []string
			for _, c := range r.GetContracts() {
				got = append(got, c.GetSynthesisId())
			}
			return got, r.GetNextPageToken(), err
		}
	}
	inspector := caller(agentY, sessionA, 1, "inspect:all")
	for _, size := range []int32{1, 2, 3} {
		tok := testkit.CheckPaging(t, size, testkit.ZMembers(mine), list(readerOf(agentX)))
		testkit.CheckTokenMismatch(t, tok, list(readerOf(agentY)))
		tok = testkit.CheckPaging(t, size, testkit.ZMembers(all), list(inspector))
		testkit.CheckTokenMismatch(t, tok, list(readerOf(agentY)))
	}
}

// AIP-158: ListPatterns pages the patterns in recipe name order.
func TestListPatternsPages(t *testing.T) {
	e := newEnv(t, envConfig{})
	var pats []*recipe.Pattern
	var names []string
	for i := range 3 {
		for _, p := range e.srv.Patterns() {
			cp := *p
			cp.RecipeName = fmt.Sprintf("%s-%d", p.RecipeName, i)
			pats = append(pats, &cp)
			names = append(names, cp.RecipeName)
		}
	}
	e.srv.SetPatterns(pats)
	slices.SortFunc(names, strings.Compare)
	list := func(size int32, tok string) ([]string, string, error) {
		r, err := e.client.ListPatterns(context.Background(), &rcnsv1.ListPatternsRequest{PageSize: size, PageToken: tok})
		var got []string
		for _, p := range r.GetPatterns() {
			got = append(got, p.GetRecipeName())
		}
		return got, r.GetNextPageToken(), err
	}
	for _, size := range []int32{1, 2, 4} {
		testkit.CheckPaging(t, size, names, list)
	}
}
