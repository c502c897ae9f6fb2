package agp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
)

// discover serves POST /agp/discover (AGP §6.1) as DISCOVER /methods: the
// business's capabilities are its endpoints.
func (h *Handler) discover(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodDiscover)
	if !c.authenticate(ScopeDiscover) {
		return
	}
	m, e := c.readObject("businessId")
	if e != nil {
		c.refuse(e)
		return
	}
	id, e := businessID(m)
	if e != nil {
		c.refuse(e)
		return
	}
	tx := c.newTransaction(OpDiscover, id, m)
	if findBusiness(h.o.Catalog.Current(), id) == nil {
		c.failTx(tx, businessNotFound(id))
		return
	}
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(agtp.MethodDiscover, "/methods", nil),
		Conn:    c.conn(),
		Intercept: func(_ context.Context, v *pipeline.View) *agtp.Response {
			b := findBusiness(v.State, id)
			if b == nil {
				e := businessNotFound(id)
				e.Details = map[string]any{"transactionId": tx.id}
				return e.response(c.rid)
			}
			body, err := json.Marshal(map[string]any{"transactionId": tx.id, "status": "succeeded", "data": b.discoverData(h.o.ServerID)})
			if err != nil {
				return (&apiError{Status: 500, Code: CodeInternal, Message: "the capabilities could not be encoded"}).response(c.rid)
			}
			return agtp.NewResponse(http.StatusOK, ContentType, body)
		},
		Shape: c.shaper(tx),
	})
	c.finish(tx, out)
}

func businessNotFound(id string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: CodeBusinessNotFound, Error: "Business not found",
		Message: fmt.Sprintf("No business is registered with id %q; GET /agp/businesses lists them.", id)}
}

// resolve finds the target's business in the current catalog and binds an
// adapter request to its endpoint.
func (h *Handler) resolve(t *target, op string) *apiError {
	b := findBusiness(h.o.Catalog.Current(), t.Business)
	if b == nil {
		return businessNotFound(t.Business)
	}
	return b.bind(op, t)
}

// operate serves POST /agp/query and POST /agp/execute (AGP §6.2, §6.4):
// the request's method and path are the AGTP call, its parameters the
// input, and the endpoint's handler runs.
func (h *Handler) operate(w http.ResponseWriter, r *http.Request, op string) {
	defMethod := agtp.MethodQuery
	if op == OpExecute {
		defMethod = agtp.MethodExecute
	}
	c := h.begin(w, r, defMethod)
	scope := ScopeQuery
	if op == OpExecute {
		scope = ScopeExecute
	}
	if !c.authenticate(scope) {
		return
	}
	t, e := c.parseTarget(defMethod)
	if e != nil {
		c.refuse(e)
		return
	}
	var idemKey string
	if op == OpExecute {
		if idemKey, e = idempotencyKey(r); e != nil {
			c.refuse(e)
			return
		}
	}
	hash, err := t.hash()
	if err != nil {
		c.refuse(validation("The request cannot be canonicalized: "+err.Error(), nil))
		return
	}
	tx := c.newTransaction(op, t.Business, map[string]any{"businessId": t.Business, "request": t.Canonical})
	if e := h.resolve(t, op); e != nil {
		c.failTx(tx, e)
		return
	}
	req := c.request(t.Method, t.Path, t.body())
	if idemKey != "" {
		req.Header.Set(agtp.HeaderIdempotencyKey, idempotencyPrefix+idemKey)
	}
	token := strings.TrimSpace(r.Header.Get(HeaderConfirmationToken))
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: req,
		Conn:    c.conn(),
		// The AGP request, business included, is what an Idempotency-Key
		// is bound to: the AGTP call alone can be the same for two of
		// them (a member the mapping drops, another business's endpoint
		// with the same method and path).
		Fingerprint: hash,
		Intercept: func(ctx context.Context, v *pipeline.View) *agtp.Response {
			if e := checkCapability(v.Endpoint, t, op); e != nil {
				e.Details["transactionId"] = tx.id
				return e.response(c.rid)
			}
			if op != OpExecute {
				return nil
			}
			// After policy and after an idempotent replay would have
			// answered: a retry carrying the token its first attempt
			// consumed gets the stored outcome, not a refusal.
			in := &agpv1.ConsumeConfirmationRequest{AgentId: v.AgentID, BusinessId: t.Business, RequestSha256: hash, Token: token}
			if t.Amount != nil {
				in.AmountPresent, in.AmountCents = true, *t.Amount
			}
			res, err := h.o.Keys.ConsumeConfirmation(ctx, in)
			if err != nil {
				h.o.Log.WarnContext(ctx, "agp confirmation check failed", "error", err)
				return (&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "The confirmation policy cannot be checked right now; retry shortly.",
					Details: map[string]any{"transactionId": tx.id}}).response(c.rid)
			}
			if !res.GetAllowed() {
				return (&apiError{Status: http.StatusForbidden, Code: codeOf(res.GetReason()), Error: res.GetMessage(), Message: res.GetMessage(),
					//lint:ignore SA1019 the first release's policysvc sends the policy only as a string
					Details: map[string]any{"transactionId": tx.id, "policy": enumname.Prefer(res.GetExecutePolicy(), res.GetPolicy())}}).response(c.rid)
			}
			return nil
		},
		Shape: c.shaper(tx),
	})
	c.finish(tx, out)
}

// prepare serves POST /agp/execute/prepare (AGP §6.3, §8) as QUOTE of the
// execute it confirms: the call is resolved and its input validated, and
// nothing runs.
func (h *Handler) prepare(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, methodQuote)
	if !c.authenticate(ScopeExecute) {
		return
	}
	t, e := c.parseTarget(agtp.MethodExecute)
	if e != nil {
		c.refuse(e)
		return
	}
	hash, err := t.hash()
	if err != nil {
		c.refuse(validation("The request cannot be canonicalized: "+err.Error(), nil))
		return
	}
	if e := h.resolve(t, OpExecute); e != nil {
		c.refuse(e)
		return
	}
	quote, _ := json.Marshal(map[string]any{"method": t.Method, "path": t.Path, "parameters": t.Params})
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(methodQuote, "/", quote),
		Conn:    c.conn(),
		Intercept: func(ctx context.Context, v *pipeline.View) *agtp.Response {
			ep, refusal := v.Target(t.Method, t.Path, t.Params)
			if refusal != nil {
				return fromAGTP(refusal).response(c.rid)
			}
			if e := checkCapability(ep, t, OpExecute); e != nil {
				return e.response(c.rid)
			}
			res, err := h.o.Keys.IssueConfirmation(ctx, &agpv1.IssueConfirmationRequest{AgentId: v.AgentID, BusinessId: t.Business, RequestSha256: hash})
			if err != nil {
				h.o.Log.WarnContext(ctx, "agp confirmation not issued", "error", err)
				return (&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "A confirmation token cannot be issued right now; retry shortly."}).response(c.rid)
			}
			summary := fmt.Sprintf("Execute request for business '%s': %s %s", t.Business, t.Method, t.Path)
			if t.Amount != nil {
				summary += fmt.Sprintf(" (requested amount: %s cents)", strconv.FormatFloat(*t.Amount, 'f', -1, 64))
			}
			b, _ := json.Marshal(map[string]any{
				"confirmationToken": res.GetToken(),
				"expiresAt":         res.GetExpiresAt().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"),
				"summary":           summary,
				//lint:ignore SA1019 the first release's policysvc sends the policy only as a string
				"policy": enumname.Prefer(res.GetExecutePolicy(), res.GetPolicy()),
			})
			return agtp.NewResponse(http.StatusOK, ContentType, b)
		},
		Shape: c.shapeRefusal,
	})
	c.write(out)
}
