package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/services/agtp"
)

// The operations of the demo domain's request mix. Each is one AGTP
// request; the comment is what it sends.
const (
	OpDiscover   = "discover"    // DISCOVER / without Agent-ID: the manifest
	OpDescribe   = "describe"    // DESCRIBE /: the capability document
	OpGetOrder   = "get-order"   // QUERY /orders/ord-1001
	OpListOrders = "list-orders" // QUERY /orders?status=shipped&limit=10
	OpSummarize  = "summarize"   // SUMMARIZE /documents with a short text
	OpCreate     = "create"      // CREATE /orders with a fresh Idempotency-Key
	OpReplay     = "replay"      // CREATE /orders again with an earlier key and body
	OpInspect    = "inspect"     // INSPECT /?target=chain_head&agent_id=<caller>
	OpPropose    = "propose"     // PROPOSE / for SUMMARIZE /orders/{order_id} (core §7.2.7 form)
)

// Ops lists every operation in report order.
var Ops = []string{OpDiscover, OpDescribe, OpGetOrder, OpListOrders, OpSummarize, OpCreate, OpReplay, OpInspect, OpPropose}

// Weight is one operation's share of a mix.
type Weight struct {
	Op     string
	Weight int
}

// Mix is a weighted set of operations.
type Mix []Weight

// DefaultMix is a read-heavy agent workload: mostly lookups through the
// full pipeline, some discovery, writes with an Idempotency-Key, a share
// of retried writes (replays) and a little audit reading and
// negotiation.
var DefaultMix = Mix{
	{OpDiscover, 8}, {OpDescribe, 4}, {OpGetOrder, 35}, {OpListOrders, 10}, {OpSummarize, 10},
	{OpCreate, 12}, {OpReplay, 5}, {OpInspect, 12}, {OpPropose, 4},
}

// PipelineMix is QUERY /orders/{order_id} only: the full pipeline
// (identity cache, policysvc Authorize, the handler, auditsvc
// SignAndAppend) with nothing else mixed in.
var PipelineMix = Mix{{OpGetOrder, 1}}

// ParseMix reads "op=weight,op=weight", e.g. "get-order=3,discover=1".
func ParseMix(s string) (Mix, error) {
	var m Mix
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		op, w, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("mix entry %q is not op=weight", part)
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("mix entry %q: weight must be a non-negative integer", part)
		}
		m = append(m, Weight{Op: strings.TrimSpace(op), Weight: n})
	}
	return m, m.Validate()
}

// Validate checks every operation is known and some weight is positive.
func (m Mix) Validate() error {
	total := 0
	var errs []error
	for _, w := range m {
		if !slices.Contains(Ops, w.Op) {
			errs = append(errs, fmt.Errorf("unknown operation %q (known: %s)", w.Op, strings.Join(Ops, ", ")))
		}
		total += w.Weight
	}
	if total <= 0 {
		errs = append(errs, errors.New("the mix has no positive weight"))
	}
	return errors.Join(errs...)
}

// String is the mix in ParseMix syntax.
func (m Mix) String() string {
	parts := make([]string, len(m))
	for i, w := range m {
		parts[i] = w.Op + "=" + strconv.Itoa(w.Weight)
	}
	return strings.Join(parts, ",")
}

// needsAgent reports whether the mix sends requests with an Agent-ID.
func (m Mix) needsAgent() bool {
	for _, w := range m {
		if w.Weight > 0 && w.Op != OpDiscover && w.Op != OpDescribe {
			return true
		}
	}
	return false
}

// picker draws operations by weight.
type picker struct {
	ops   []int // indexes into Ops, cumulative by weight
	cum   []int
	total int
}

func newPicker(m Mix) picker {
	var p picker
	for _, w := range m {
		if w.Weight <= 0 {
			continue
		}
		p.total += w.Weight
		p.ops = append(p.ops, slices.Index(Ops, w.Op))
		p.cum = append(p.cum, p.total)
	}
	return p
}

func (p *picker) pick(r *rand.Rand) int {
	n := r.IntN(p.total)
	i, _ := slices.BinarySearch(p.cum, n+1)
	return p.ops[i]
}

// summarizeText is a few sentences for SUMMARIZE /documents.
const summarizeText = "The quarterly report shows steady growth in all regions. Orders rose by twelve percent. " +
	"Returns fell slightly. The new warehouse opened on schedule. Staff turnover remained low."

// builder makes the requests of one worker. Requests that never change
// are built once and shared: agtp.Request.Write only reads them.
type builder struct {
	agents []string
	// pinned is the one agent this worker speaks for (its connection is
	// that agent's), or -1 for any.
	pinned int
	worker int
	seq    uint64
	// static[agent][op] is the prebuilt request, nil for dynamic ops.
	static [][]*agtp.Request
	// replays remembers recent CREATEs that succeeded, to send again.
	replays []replay
	next    int
}

type replay struct {
	agent int
	req   *agtp.Request
}

// maxReplays bounds the remembered CREATEs per worker.
const maxReplays = 64

func mustRequest(method, target string, headers ...string) *agtp.Request {
	r, err := agtp.NewRequest(method, target)
	if err != nil {
		panic(err) // the targets are constants of this file
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func withBody(r *agtp.Request, body string) *agtp.Request {
	r.Body = []byte(body)
	r.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	return r
}

// staticRequests prebuilds the unchanging requests for every agent; they
// are shared by all workers.
func staticRequests(agents []string) [][]*agtp.Request {
	if len(agents) == 0 {
		agents = []string{""}
	}
	out := make([][]*agtp.Request, len(agents))
	for i, a := range agents {
		reqs := make([]*agtp.Request, len(Ops))
		for j, op := range Ops {
			reqs[j] = staticRequest(op, a)
		}
		out[i] = reqs
	}
	return out
}

func staticRequest(op, agent string) *agtp.Request {
	switch op {
	case OpDiscover:
		return mustRequest("DISCOVER", "/")
	case OpDescribe:
		return mustRequest("DESCRIBE", "/")
	case OpGetOrder:
		return mustRequest("QUERY", "/orders/ord-1001", agtp.HeaderAgentID, agent)
	case OpListOrders:
		// Only shipped orders: the demo desk keeps every order created
		// in memory, and the CREATEs of a run must not grow the answer.
		return mustRequest("QUERY", "/orders?status=shipped&limit=10", agtp.HeaderAgentID, agent)
	case OpSummarize:
		return withBody(mustRequest("SUMMARIZE", "/documents", agtp.HeaderAgentID, agent),
			`{"text":"`+summarizeText+`","max_sentences":2}`)
	case OpInspect:
		return mustRequest("INSPECT", "/?target=chain_head&agent_id="+agent, agtp.HeaderAgentID, agent)
	case OpPropose:
		return withBody(mustRequest("PROPOSE", "/", agtp.HeaderAgentID, agent),
			`{"proposed_method":"SUMMARIZE","intent":"Summarize one order in a sentence.","signature":{"path":"/orders/{order_id}"}}`)
	}
	return nil // dynamic
}

// build returns the request for op (an index into Ops), the agent it
// speaks for, and the operation it really is: a replay with nothing to
// replay yet is a fresh CREATE.
func (b *builder) build(op int, r *rand.Rand) (*agtp.Request, int, int) {
	agent := 0
	switch {
	case b.pinned >= 0:
		agent = b.pinned
	case len(b.agents) > 1:
		agent = r.IntN(len(b.agents))
	}
	switch Ops[op] {
	case OpCreate:
		return b.create(agent, r), agent, op
	case OpReplay:
		if len(b.replays) == 0 {
			return b.create(agent, r), agent, opCreate
		}
		rp := b.replays[r.IntN(len(b.replays))]
		return rp.req, rp.agent, op
	}
	return b.static[agent][op], agent, op
}

// opCreate is OpCreate's index in Ops.
var opCreate = slices.Index(Ops, OpCreate)

func (b *builder) create(agent int, r *rand.Rand) *agtp.Request {
	b.seq++
	key := "lg-" + strconv.Itoa(b.worker) + "-" + strconv.FormatUint(b.seq, 10) + "-" + strconv.FormatUint(r.Uint64()>>32, 36)
	body := `{"customer_ref":"` + key + `","lines":[{"sku":"gadget","quantity":` + strconv.Itoa(1+r.IntN(3)) + `}]}`
	return withBody(mustRequest("CREATE", "/orders", agtp.HeaderAgentID, b.agent(agent), agtp.HeaderIdempotencyKey, key), body)
}

func (b *builder) agent(i int) string {
	if len(b.agents) == 0 {
		return ""
	}
	return b.agents[i]
}

// done records a successful CREATE so a later replay can repeat it.
func (b *builder) done(op int, req *agtp.Request, agent, status int) {
	if Ops[op] != OpCreate || status != agtp.StatusOK {
		return
	}
	if len(b.replays) < maxReplays {
		b.replays = append(b.replays, replay{agent, req})
		return
	}
	b.replays[b.next] = replay{agent, req}
	b.next = (b.next + 1) % maxReplays
}
