// Package demo is the handlers of the demo domain that `make run` loads
// (the endpoint definitions are in catalogsvc/demo): a small order desk
// (with PURCHASE of an order), a document summarizer and a report runner. It doubles as an example of
// writing registered_function handlers with package handler.
//
// State is kept in memory in the front door process, which is enough for
// a demo; real handlers keep their state in their own systems.
package demo

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/agtpsuite/agtp/frontdoor/handler"
)

// Line is one order line.
type Line struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Order is an order of the demo desk.
type Order struct {
	OrderID     string   `json:"order_id"`
	Status      string   `json:"status"`
	CustomerRef string   `json:"customer_ref,omitempty"`
	Lines       []Line   `json:"lines"`
	CreatedBy   string   `json:"created_by,omitempty"`
	Payment     *Payment `json:"payment,omitempty"`
	// Owner is the principal the order belongs to (TRANSFER moves it);
	// Custody is every transfer, oldest first.
	Owner   string    `json:"owner,omitempty"`
	Custody []Custody `json:"custody,omitempty"`
	// Grants are the access grants AUTHORIZE issued on the order.
	Grants []Grant `json:"grants,omitempty"`
}

// Custody is one ownership transfer of an order.
type Custody struct {
	FromPrincipal string `json:"from_principal"`
	ToPrincipal   string `json:"to_principal"`
	Reason        string `json:"reason,omitempty"`
	By            string `json:"by,omitempty"`
}

// Grant is an access grant on an order (AUTHORIZE).
type Grant struct {
	GrantID   string   `json:"grant_id"`
	OrderID   string   `json:"order_id"`
	Subject   string   `json:"subject"`
	Resource  string   `json:"resource,omitempty"`
	Scope     []string `json:"scope"`
	ExpiresAt string   `json:"expires_at"`
	GrantedBy string   `json:"granted_by,omitempty"`
}

// Customer is a registered customer of the desk (REGISTER).
type Customer struct {
	CustomerID   string `json:"customer_id"`
	Name         string `json:"name"`
	Email        string `json:"email,omitempty"`
	RegisteredBy string `json:"registered_by,omitempty"`
}

// Payment is how an order was paid (PURCHASE): the amount, and the
// principal on whose behalf which agent paid. Moving money is out of
// scope (core §9: payment rails are not AGTP's); the desk records it.
type Payment struct {
	Amount      string `json:"amount"`
	Currency    string `json:"currency"`
	PrincipalID string `json:"principal_id"`
	PaidBy      string `json:"paid_by,omitempty"`
}

// stock is what the demo desk can sell; other SKUs are out_of_stock.
var stock = map[string]int{"widget": 1000, "gadget": 250, "gizmo": 10}

type desk struct {
	mu        sync.Mutex
	orders    map[string]*Order
	customers map[string]*Customer
	seq       atomic.Uint64
	// reindexRuns counts runs of the reindex procedure (RUN).
	reindexRuns atomic.Uint64
}

// Register binds the demo functions on reg.
func Register(reg *handler.Registry) {
	d := &desk{orders: map[string]*Order{}, customers: map[string]*Customer{}}
	d.orders["ord-1001"] = &Order{OrderID: "ord-1001", Status: "shipped", Lines: []Line{{SKU: "widget", Quantity: 3}}}
	d.orders["ord-1002"] = &Order{OrderID: "ord-1002", Status: "open", Lines: []Line{{SKU: "gadget", Quantity: 1}}}
	reg.Register("demo.orders.create", handler.Typed(d.create))
	reg.Register("demo.orders.get", handler.Typed(d.get))
	reg.Register("demo.orders.list", handler.Typed(d.list))
	reg.Register("demo.orders.cancel", handler.Typed(d.cancel))
	reg.Register("demo.orders.purchase", handler.Typed(d.purchase))
	reg.Register("demo.orders.authorize", handler.Typed(d.authorize))
	reg.Register("demo.orders.transfer", handler.Typed(d.transfer))
	reg.Register("demo.customers.register", handler.Typed(d.register))
	reg.Register("demo.procedures.reindex", handler.Typed(d.reindex))
	reg.Register("demo.documents.summarize", handler.Typed(summarize))
	reg.Register("demo.reports.run", handler.Typed(runReport))
}

type createInput struct {
	CustomerRef string `json:"customer_ref"`
	Lines       []Line `json:"lines"`
}

func (d *desk) create(_ context.Context, call *handler.Call, in createInput) (*Order, error) {
	for _, l := range in.Lines {
		if l.Quantity > stock[l.SKU] {
			return nil, handler.Errorf("out_of_stock", "only %d of %q in stock", stock[l.SKU], l.SKU)
		}
	}
	o := &Order{
		OrderID:     fmt.Sprintf("ord-%d", 2000+d.seq.Add(1)),
		Status:      "open",
		CustomerRef: in.CustomerRef,
		Lines:       in.Lines,
		CreatedBy:   call.Caller.AgentID,
		Owner:       orderOwner(in.CustomerRef, call.Caller.Owner),
	}
	d.mu.Lock()
	d.orders[o.OrderID] = o
	d.mu.Unlock()
	return o, nil
}

// lookupLocked finds an order; d.mu is held. A missing one is the
// endpoints' declared order_not_found.
func (d *desk) lookupLocked(id string) (*Order, error) {
	o, ok := d.orders[id]
	if !ok {
		return nil, &handler.Error{Name: "order_not_found", Message: "no order " + id}
	}
	return o, nil
}

type orderRef struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason"`
}

func (d *desk) get(_ context.Context, _ *handler.Call, in orderRef) (*Order, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, err := d.lookupLocked(in.OrderID)
	if err != nil {
		return nil, err
	}
	c := *o
	return &c, nil
}

// defaultListLimit bounds a list without limit: the answer to a growing
// store must not grow with it.
const defaultListLimit = 20

// orderSeq is the number of an order ID ("ord-1001" → 1001).
func orderSeq(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "ord-"))
	return n
}

type listInput struct {
	Status string `json:"status"`
	Limit  int    `json:"limit"`
}

func (d *desk) list(_ context.Context, _ *handler.Call, in listInput) (map[string][]Order, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []Order{}
	for _, o := range d.orders {
		if in.Status == "" || o.Status == in.Status {
			out = append(out, *o)
		}
	}
	// Newest first: IDs are issued in increasing numeric order.
	sort.Slice(out, func(i, j int) bool { return orderSeq(out[i].OrderID) > orderSeq(out[j].OrderID) })
	limit := in.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return map[string][]Order{"orders": out}, nil
}

func (d *desk) cancel(_ context.Context, _ *handler.Call, in orderRef) (*Order, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, err := d.lookupLocked(in.OrderID)
	switch {
	case err != nil:
		return nil, err
	case o.Status == "shipped":
		return nil, handler.Errorf("order_already_shipped", "order %s has shipped and can no longer be cancelled", in.OrderID)
	case o.Status == "cancelled":
		// A conflict with the order's current state (core §5.6, 409).
		return nil, &handler.Error{Name: "order_already_cancelled", Message: "order " + in.OrderID + " is already cancelled", Status: 409}
	}
	o.Status = "cancelled"
	c := *o
	return &c, nil
}

type purchaseInput struct {
	OrderID     string `json:"order_id"`
	PrincipalID string `json:"principal_id"`
	Amount      string `json:"amount"`
	Currency    string `json:"currency"`
}

// purchase pays an open order. Scope, merchant and budget checks have run
// before it (policysvc), so a refused PURCHASE never reaches it.
func (d *desk) purchase(_ context.Context, call *handler.Call, in purchaseInput) (*Order, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, err := d.lookupLocked(in.OrderID)
	switch {
	case err != nil:
		return nil, err
	case o.Status == "paid" || o.Status == "shipped":
		// Paying twice is a conflict with the order's state (core §5.6, 409);
		// an order ships only once paid.
		return nil, &handler.Error{Name: "order_already_paid", Message: "order " + in.OrderID + " is already " + o.Status, Status: 409}
	case o.Status == "cancelled":
		return nil, &handler.Error{Name: "order_cancelled", Message: "order " + in.OrderID + " is cancelled and cannot be paid", Status: 409}
	}
	o.Status = "paid"
	o.Payment = &Payment{Amount: in.Amount, Currency: in.Currency, PrincipalID: in.PrincipalID, PaidBy: call.Caller.AgentID}
	c := *o
	return &c, nil
}

type summarizeInput struct {
	Text         string `json:"text"`
	MaxSentences int    `json:"max_sentences"`
}

type summary struct {
	Summary   string `json:"summary"`
	Sentences int    `json:"sentences"`
}

// summarize keeps the leading sentences: a stand-in for a model call that
// is deterministic, so replays and tests can compare results.
func summarize(_ context.Context, _ *handler.Call, in summarizeInput) (summary, error) {
	limit := in.MaxSentences
	if limit <= 0 {
		limit = 2
	}
	var sentences []string
	start := 0
	for i, r := range in.Text {
		if r == '.' || r == '!' || r == '?' {
			if s := strings.TrimSpace(in.Text[start : i+1]); s != "" {
				sentences = append(sentences, s)
			}
			start = i + 1
		}
	}
	if rest := strings.TrimFunc(in.Text[start:], unicode.IsSpace); rest != "" {
		sentences = append(sentences, rest)
	}
	if len(sentences) > limit {
		sentences = sentences[:limit]
	}
	return summary{Summary: strings.Join(sentences, " "), Sentences: len(sentences)}, nil
}

type reportInput struct {
	ReportID string `json:"report_id"`
	Period   string `json:"period"`
}

type report struct {
	ReportID string           `json:"report_id"`
	Period   string           `json:"period"`
	Rows     []map[string]any `json:"rows"`
}

var reports = map[string][]map[string]any{
	"sales-by-sku": {{"sku": "widget", "units": 120}, {"sku": "gadget", "units": 42}, {"sku": "gizmo", "units": 7}},
	"open-orders":  {{"status": "open", "count": 1}},
}

func runReport(_ context.Context, _ *handler.Call, in reportInput) (report, error) {
	rows, ok := reports[in.ReportID]
	if !ok {
		return report{}, &handler.Error{Name: "report_not_found", Message: "no report " + in.ReportID}
	}
	period := in.Period
	if period == "" {
		period = "week"
	}
	return report{ReportID: in.ReportID, Period: period, Rows: rows}, nil
}

// orderOwner is a new order's principal: the customer it is for, else the
// creating agent's principal.
func orderOwner(customerRef, agentOwner string) string {
	if customerRef != "" {
		return customerRef
	}
	return agentOwner
}

type authorizeInput struct {
	OrderID  string   `json:"order_id"`
	Subject  string   `json:"subject"`
	Resource string   `json:"resource"`
	Scope    []string `json:"scope"`
	TTL      int      `json:"ttl"`
}

// defaultGrantTTL is a grant's lifetime when AUTHORIZE names no ttl.
const defaultGrantTTL = time.Hour

// authorize issues an access grant on an order. The suite has checked
// authorization:grant and that the scope does not exceed the caller's
// own before it runs.
func (d *desk) authorize(_ context.Context, call *handler.Call, in authorizeInput) (*Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, err := d.lookupLocked(in.OrderID)
	if err != nil {
		return nil, err
	}
	ttl := defaultGrantTTL
	if in.TTL > 0 {
		ttl = time.Duration(in.TTL) * time.Second
	}
	g := Grant{
		GrantID:   fmt.Sprintf("grant-%d", d.seq.Add(1)),
		OrderID:   o.OrderID,
		Subject:   in.Subject,
		Resource:  in.Resource,
		Scope:     in.Scope,
		ExpiresAt: time.Now().Add(ttl).UTC().Format(time.RFC3339),
		GrantedBy: call.Caller.AgentID,
	}
	o.Grants = append(o.Grants, g)
	return &g, nil
}

type transferInput struct {
	OrderID       string `json:"order_id"`
	FromPrincipal string `json:"from_principal"`
	ToPrincipal   string `json:"to_principal"`
	Reason        string `json:"reason"`
}

// transfer moves an order to another principal; from_principal must be
// the current owner (a stale view is a conflict, not a silent overwrite).
func (d *desk) transfer(_ context.Context, call *handler.Call, in transferInput) (*Order, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, err := d.lookupLocked(in.OrderID)
	if err != nil {
		return nil, err
	}
	if o.Owner != in.FromPrincipal {
		return nil, &handler.Error{Name: "owner_mismatch", Status: 409,
			Message: "order " + in.OrderID + " does not belong to " + in.FromPrincipal}
	}
	o.Owner = in.ToPrincipal
	o.Custody = append(o.Custody, Custody{FromPrincipal: in.FromPrincipal, ToPrincipal: in.ToPrincipal, Reason: in.Reason, By: call.Caller.AgentID})
	c := *o
	return &c, nil
}

type registerInput struct {
	EntityType string `json:"entity_type"`
	Data       struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	} `json:"data"`
}

// register creates a customer. Retries are the suite's business: the
// idempotency_key parameter is the request's Idempotency-Key, so a
// repeated registration is a replay and never reaches here.
func (d *desk) register(_ context.Context, call *handler.Call, in registerInput) (*Customer, error) {
	c := &Customer{
		CustomerID:   fmt.Sprintf("cust-%d", 3000+d.seq.Add(1)),
		Name:         in.Data.Name,
		Email:        in.Data.Email,
		RegisteredBy: call.Caller.AgentID,
	}
	d.mu.Lock()
	d.customers[c.CustomerID] = c
	d.mu.Unlock()
	return c, nil
}

type reindexInput struct {
	Status string `json:"status"`
}

// reindex is a registered procedure (RUN): it counts the orders in a
// status and reports how many times it has run, so a caller can see that
// a refused RUN executed nothing.
func (d *desk) reindex(_ context.Context, _ *handler.Call, in reindexInput) (map[string]any, error) {
	d.mu.Lock()
	n := 0
	for _, o := range d.orders {
		if in.Status == "" || o.Status == in.Status {
			n++
		}
	}
	d.mu.Unlock()
	return map[string]any{"procedure_id": "reindex-orders", "orders_indexed": n, "runs": d.reindexRuns.Add(1)}, nil
}
