package intent

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	catalogdemo "github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// demoCandidates are the demo catalog's endpoints, the order-brief
// composition with the steps its recipe makes, and one RCNS pattern.
func demoCandidates(t *testing.T) []Candidate {
	t.Helper()
	eps, err := catalogdemo.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	var out []Candidate
	for _, ep := range eps {
		c := FromEndpoint(ep)
		if c.Name == "order-brief" {
			c.Steps = []string{"QUERY /orders/{order_id}", "SUMMARIZE /documents"}
		}
		out = append(out, c)
	}
	out = append(out, Candidate{
		Kind: KindPattern, Name: "order-refund", Method: "CANCEL", Path: "/orders/{order_id}/refund",
		Description: "Cancels an open order and refunds its payment to the payer.",
		Intent:      "Refund the order with the given identifier by cancelling it and returning the money.",
		Outcome:     "The order is cancelled and a refund is issued.", Capability: "transaction", Impact: "irreversible",
		Parameters: []string{"order_id", "reason"}, Required: []string{"order_id"}, RequiredScopes: []string{"orders:write", "payments:refund"},
		Steps: []string{"CANCEL /orders/{order_id}", "PURCHASE /orders/{order_id}/payment"},
	})
	return out
}

// TestRankDemoIntents: realistic intents for the demo domain (orders,
// customers, payments to the merchant, refunds, reports, documents, the
// server's own documents and MCP tools) and the endpoint each must rank
// first. "return the order" is also the deprecated FETCH
// /order-history/{order_id}'s intent: the current endpoint wins the tie.
func TestRankDemoIntents(t *testing.T) {
	ix := New(demoCandidates(t))
	tests := []struct {
		intent, want string
		terms        []string
	}{
		{"cancel my order ord-1002", "CANCEL /orders/{order_id}", []string{"cancel", "order"}},
		{"show me order ord-1001", "QUERY /orders/{order_id}", []string{"order"}},
		{"what is the status of order ord-7", "QUERY /orders/{order_id}", []string{"status", "order"}},
		{"list all my open orders", "QUERY /orders", []string{"list", "open", "orders"}},
		{"which orders have shipped", "QUERY /orders", []string{"orders", "shipped"}},
		{"place an order for two widgets", "CREATE /orders", []string{"place", "order"}},
		{"create a purchase order", "CREATE /orders", []string{"create", "order"}},
		{"pay for order ord-1002", "PURCHASE /orders/{order_id}/payment", []string{"pay", "order"}},
		{"refund order ord-1001", "CANCEL /orders/{order_id}/refund", []string{"refund", "order"}},
		{"register a new customer named Ada", "REGISTER /customers", []string{"register", "new", "customer", "named"}},
		{"sign up a customer with an email address", "REGISTER /customers", []string{"customer", "email"}},
		{"summarize this text for me", "SUMMARIZE /documents", []string{"summarize", "text"}},
		{"brief summary of order ord-1001", "SUMMARIZE /order-briefs/{order_id}", []string{"brief", "order"}},
		{"run the monthly sales report", "EXECUTE /reports/{report_id}", []string{"run", "monthly", "report"}},
		{"give bob access to my order", "AUTHORIZE /orders/{order_id}/grants", []string{"access", "order"}},
		{"transfer the order to alice", "TRANSFER /orders/{order_id}", []string{"transfer", "order"}},
		{"hand over ownership of an order", "TRANSFER /orders/{order_id}", []string{"ownership", "order"}},
		{"get the server discovery document", "QUERY /server-card", []string{"server", "discovery", "document"}},
		{"Cancelling ORDERS", "CANCEL /orders/{order_id}", []string{"Cancelling", "ORDERS"}},
		{"return the order ord-1001", "QUERY /orders/{order_id}", []string{"return", "order"}},
		{"pay the merchant for order ord-4 on behalf of my principal", "PURCHASE /orders/{order_id}/payment", []string{"pay", "order", "behalf", "principal"}},
		{"call this server's endpoints as MCP tools", "EXECUTE /mcp", []string{"call", "server", "endpoints", "MCP", "tools"}},
		{"rows of report r-7 for last month", "EXECUTE /reports/{report_id}", []string{"rows", "report", "month"}},
		{"email of the new customer", "REGISTER /customers", []string{"email", "new", "customer"}},
	}
	for _, tc := range tests {
		t.Run(tc.intent, func(t *testing.T) {
			ms := ix.Rank(tc.intent, 3)
			if len(ms) == 0 {
				t.Fatal("no match")
			}
			if got := ms[0].Candidate.Key(); got != tc.want {
				t.Fatalf("top match %s (%.3f), want %s; ranking %v", got, ms[0].Score, tc.want, keys(ms))
			}
			if !slices.Equal(ms[0].Terms, tc.terms) {
				t.Errorf("terms %v, want %v", ms[0].Terms, tc.terms)
			}
			for i := 1; i < len(ms); i++ {
				if ms[i].Score > ms[i-1].Score {
					t.Errorf("ranking not in score order: %v", ms)
				}
			}
		})
	}
	if ms := ix.Rank("the and of", 0); len(ms) != 0 {
		t.Errorf("stop words alone matched %v", keys(ms))
	}
}

func keys(ms []Match) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Candidate.Key() + "=" + strconv.FormatFloat(m.Score, 'f', 3, 64)
	}
	return out
}

// TestRankIsDeterministic: the same intent over the same candidates in any
// order ranks the same, ties included.
func TestRankIsDeterministic(t *testing.T) {
	cands := demoCandidates(t)
	want := New(cands).Rank("order", 0)
	if len(want) < 5 {
		t.Fatalf("only %d matches for a word every order endpoint has", len(want))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(cands)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := New(shuffled).Rank("order", 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("ranking changed with candidate order:\n%v\n%v", keys(got), keys(want))
		}
	}
}

// TestTieBreaks pins the order of equal scores: current before
// deprecated, informational before side effects, an endpoint before a
// composite, fewer scopes, then key.
func TestTieBreaks(t *testing.T) {
	base := Candidate{Kind: KindEndpoint, Method: "QUERY", Path: "/widgets", Intent: "Return the widgets.", Impact: "informational"}
	with := func(f func(c *Candidate)) Candidate { c := base; f(&c); return c }
	tests := []struct {
		name          string
		first, second Candidate
	}{
		{"current before deprecated", with(func(c *Candidate) { c.Path = "/widgets/b" }), with(func(c *Candidate) { c.Path = "/widgets/a"; c.Deprecated = true })},
		{"informational before side effects", with(func(c *Candidate) { c.Method = "RESERVE" }), with(func(c *Candidate) { c.Method = "BOOK"; c.Impact = "reversible" })},
		{"endpoint before composite", with(func(c *Candidate) { c.Path = "/widgets/z" }), with(func(c *Candidate) { c.Kind = KindComposition; c.Name = "a" })},
		{"fewer required scopes", with(func(c *Candidate) { c.Path = "/widgets/z" }), with(func(c *Candidate) { c.RequiredScopes = []string{"widgets:read"} })},
		{"key in byte order", with(func(c *Candidate) { c.Path = "/widgets/a" }), with(func(c *Candidate) { c.Path = "/widgets/b" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range [][]Candidate{{tc.first, tc.second}, {tc.second, tc.first}} {
				ms := New(order).Rank("widgets", 0)
				if len(ms) != 2 || ms[0].Score != ms[1].Score {
					t.Fatalf("want two equal scores, got %v", keys(ms))
				}
				if !reflect.DeepEqual(ms[0].Candidate, tc.first) {
					t.Fatalf("first %+v, want %+v", ms[0].Candidate, tc.first)
				}
			}
		})
	}
}

// TestBounds: what a caller controls is bounded.
func TestBounds(t *testing.T) {
	ix := New(demoCandidates(t))
	long := strings.Repeat("cancel order ", 10000)
	if ms := ix.Rank(long, 1000); len(ms) == 0 || len(ms) > MaxResults {
		t.Fatalf("%d matches", len(ms))
	}
	if got := len(analyze(long)); got != maxTokens {
		t.Errorf("analyze kept %d tokens, want the bound %d", got, maxTokens)
	}
	if toks := analyze(strings.Repeat("x", 100) + " order"); len(toks) != 1 || toks[0].stem != "order" {
		t.Errorf("a %d-byte word was kept: %v", 100, toks)
	}
	p := ix.Plan(strings.Repeat("cancel the order, ", 100))
	if len(p.Steps)+len(p.Unmatched) > MaxClauses {
		t.Errorf("plan of %d parts", len(p.Steps)+len(p.Unmatched))
	}
}

// TestPlan: a goal becomes calls in its order, consecutive parts for one
// call are one step, and calls a registered composite makes become that
// composite. Nothing runs: the plan is data.
func TestPlan(t *testing.T) {
	ix := New(demoCandidates(t))
	tests := []struct {
		goal      string
		steps     []string
		unmatched []string
	}{
		{"create an order for widgets, then pay for it, then give alice access",
			[]string{"CREATE /orders", "PURCHASE /orders/{order_id}/payment", "AUTHORIZE /orders/{order_id}/grants"}, nil},
		{"show order ord-1001 and then summarize it", []string{"SUMMARIZE /order-briefs/{order_id}"}, nil},
		{"cancel order ord-1002; pay for order ord-1003", []string{"CANCEL /orders/{order_id}/refund"}, nil},
		{"register a customer named Ada and then place an order for her", []string{"REGISTER /customers", "CREATE /orders"}, nil},
		{"run the sales report. Then summarize the text.", []string{"EXECUTE /reports/{report_id}", "SUMMARIZE /documents"}, nil},
		{"list open orders and list shipped orders", []string{"QUERY /orders"}, nil},
		{"summarize the text and then fly me to the moon", []string{"SUMMARIZE /documents"}, []string{"fly me to the moon"}},
	}
	for _, tc := range tests {
		t.Run(tc.goal, func(t *testing.T) {
			p := ix.Plan(tc.goal)
			var got []string
			for _, s := range p.Steps {
				got = append(got, s.Match.Candidate.Key())
			}
			if !slices.Equal(got, tc.steps) || !slices.Equal(p.Unmatched, tc.unmatched) {
				t.Fatalf("plan %v unmatched %v, want %v unmatched %v", got, p.Unmatched, tc.steps, tc.unmatched)
			}
			if again := ix.Plan(tc.goal); !reflect.DeepEqual(again, p) {
				t.Fatal("the same goal planned twice differs")
			}
		})
	}
	p := ix.Plan("create an order for widgets, then pay for it")
	if in := p.Steps[1].Inputs; !slices.Contains(in, "order_id") || !slices.Contains(in, "amount") {
		t.Errorf("PURCHASE step inputs %v, want its required members", in)
	}
}

// TestForEndpoints: the built-ins' entry point indexes endpoints and
// composites alike.
func TestForEndpoints(t *testing.T) {
	ep, err := endpoint.FromJSON([]byte(`{"method":"QUERY","path":"/refunds/{refund_id}","description":"Returns one refund.",
		"semantic":{"intent":"Return the refund with the given identifier.","actor":"agent","outcome":"The caller holds the refund.","capability":"retrieval","confidence":0.9,"impact":"informational","is_idempotent":true},
		"input_schema":{"type":"object","properties":{"refund_id":{"type":"string"}},"required":["refund_id"],"additionalProperties":false},
		"output_schema":{"type":"object"},"errors":[],"handler":{"type":"registered_function","function":"refunds.get"}}`))
	if err != nil {
		t.Fatal(err)
	}
	pattern := Candidate{Kind: KindPattern, Name: "refund-summary", Method: "SUMMARIZE", Path: "/refund-summaries", Description: "Summarizes the month's refunds."}
	ms := ForEndpoints([]*endpoint.Endpoint{ep}, pattern).Rank("where is refund rf-42", 0)
	if len(ms) != 2 || ms[0].Candidate.Key() != "QUERY /refunds/{refund_id}" || !slices.Equal(ms[0].Candidate.Required, []string{"refund_id"}) {
		t.Fatalf("ranking %v", keys(ms))
	}
}

// BenchmarkIndexAndRank is what a QUERY / costs the engine: index the
// caller's endpoints, then rank one intent, for the demo catalog and for
// 1000 endpoints (the demo's, repeated on other paths). "prepared" indexes
// candidates prepared beforehand, as the front door does once per catalog
// snapshot; "analysed" analyses every text on every call (New).
func BenchmarkIndexAndRank(b *testing.B) {
	demo := demoCandidates(&testing.T{})
	var big []Candidate
	for i := 0; len(big) < 1000; i++ {
		for _, c := range demo {
			c.Path = "/s" + strconv.Itoa(i) + c.Path
			big = append(big, c)
		}
	}
	for _, bc := range []struct {
		name  string
		cands []Candidate
	}{{"demo", demo}, {"1000", big[:1000]}} {
		b.Run(bc.name+"/analysed", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ms := New(bc.cands).Rank("cancel my order ord-1002", 10); len(ms) == 0 {
					b.Fatal("no match")
				}
			}
		})
		ps := make([]*Prepared, len(bc.cands))
		for i, c := range bc.cands {
			ps[i] = Prepare(c)
		}
		b.Run(bc.name+"/prepared", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ms := NewPrepared(ps).Rank("cancel my order ord-1002", 10); len(ms) == 0 {
					b.Fatal("no match")
				}
			}
		})
	}
}
