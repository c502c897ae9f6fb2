package console

import (
	"slices"
	"strconv"
	"testing"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
)

// pagedInts is a service listing 0..n-1 in pages of size, with offset
// tokens, counting its calls.
func pagedInts(n, size int, calls *int) func(string) ([]int, string, error) {
	return func(token string) ([]int, string, error) {
		*calls++
		off := 0
		if token != "" {
			off, _ = strconv.Atoi(token)
		}
		var out []int
		for i := off; i < min(off+size, n); i++ {
			out = append(out, i)
		}
		next := ""
		if off+size < n {
			next = strconv.Itoa(off + size)
		}
		return out, next, nil
	}
}

// TestFilteredPageFillsAcrossServicePages pins that a filter applies to
// the whole list: pages are full while enough records match, resume
// inside a service page without repeating or skipping one, and one
// console page reads at most scanPages service pages.
func TestFilteredPageFillsAcrossServicePages(t *testing.T) {
	for _, tc := range []struct {
		name             string
		n, upstream, per int
		keep             func(int) bool
	}{
		{"sparse matches across service pages", 200, 7, 3, func(i int) bool { return i%10 == 0 }},
		{"every record matches, page ends mid service page", 20, 7, 3, func(int) bool { return true }},
		{"page ends on a service page's last record", 24, 6, 3, func(i int) bool { return i%2 == 1 }},
		{"no match within the bound", 5000, 10, 3, func(i int) bool { return i == 4999 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []int
			for i := range tc.n {
				if tc.keep(i) {
					want = append(want, i)
				}
			}
			var got []int
			token := ""
			for pages := 0; ; pages++ {
				calls := 0
				p, err := filteredPage(pagedInts(tc.n, tc.upstream, &calls), tc.keep, token, tc.per)
				if err != nil {
					t.Fatal(err)
				}
				if calls > scanPages {
					t.Fatalf("one page read %d service pages, bound %d", calls, scanPages)
				}
				if len(p.Items) < tc.per && p.Next != "" && calls != scanPages {
					t.Fatalf("a short page %v with a next page before the bound", p.Items)
				}
				got = append(got, p.Items...)
				if p.Next == "" {
					break
				}
				if pages > tc.n {
					t.Fatal("the pages do not end")
				}
				token = p.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("pages held %v, want %v", got, want)
			}
		})
	}
	calls := 0
	for _, bad := range []string{"!!", scanToken("", -1), "bm90YXRva2Vu"} {
		if _, err := filteredPage(pagedInts(10, 5, &calls), func(int) bool { return true }, bad, 3); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
}

// TestAgentFilter pins each filter of the agents page, and that they
// combine.
func TestAgentFilter(t *testing.T) {
	a := &identityv1.AgentRecord{AgentId: "ab12cd", Name: "Refund-Worker", Status: identityv1.AgentStatus_AGENT_STATUS_SUSPENDED,
		Owner: "Orders Team", OwnerId: "org-7", GovernanceZone: "eu", TrustTier: 2}
	for _, tc := range []struct {
		name string
		f    agentFilter
		want bool
	}{
		{"no filter", agentFilter{Tier: -1}, true},
		{"name, any case", agentFilter{Search: "refund", Tier: -1}, true},
		{"part of the Agent-ID", agentFilter{Search: "12c", Tier: -1}, true},
		{"another name", agentFilter{Search: "billing", Tier: -1}, false},
		{"status", agentFilter{Status: "suspended", Tier: -1}, true},
		{"another status", agentFilter{Status: "active", Tier: -1}, false},
		{"owner or owner ID", agentFilter{Owner: "org-7", Tier: -1}, true},
		{"another owner", agentFilter{Owner: "Billing", Tier: -1}, false},
		{"zone", agentFilter{Zone: "eu", Tier: -1}, true},
		{"another zone", agentFilter{Zone: "us", Tier: -1}, false},
		{"tier", agentFilter{Tier: 2}, true},
		{"another tier", agentFilter{Tier: 3}, false},
		{"all at once", agentFilter{Search: "worker", Status: "suspended", Owner: "Orders", Zone: "eu", Tier: 2}, true},
		{"all but one", agentFilter{Search: "worker", Status: "suspended", Owner: "Orders", Zone: "us", Tier: 2}, false},
	} {
		if got := tc.f.matches(a); got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStateNames: the agents page shows and filters by the lifecycle state
// names the front door answers with (callerpolicy), a never-activated
// agent's included, and offers every state it can filter by.
func TestStateNames(t *testing.T) {
	show := funcs["status"].(func(identityv1.AgentStatus) string)
	for status, want := range map[identityv1.AgentStatus]string{
		identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED: "pending",
		identityv1.AgentStatus_AGENT_STATUS_ACTIVE:      "active",
		identityv1.AgentStatus_AGENT_STATUS_SUSPENDED:   "suspended",
		identityv1.AgentStatus_AGENT_STATUS_DEPRECATED:  "deprecated",
		identityv1.AgentStatus_AGENT_STATUS_RETIRED:     "retired",
	} {
		if got := show(status); got != want {
			t.Errorf("status(%v) = %q, want %q", status, got, want)
		}
		offered := slices.Contains(filterStates, want)
		if offered == (status == identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED) {
			t.Errorf("filter offers %q: %v", want, offered)
		}
		if offered && !(agentFilter{Status: want, Tier: -1}).matches(&identityv1.AgentRecord{Status: status}) {
			t.Errorf("filter %q does not match an agent in that state", want)
		}
	}
}
