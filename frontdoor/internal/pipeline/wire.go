package pipeline

import (
	"context"
	"strconv"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

// The wire stage (docs/decisions.md#D-decision-order step 1). The transport
// parses the request line and header fields and answers what does not parse
// itself, through RespondError; what it leaves to the pipeline is the length
// of the fields the front door echoes or records, whether there is a catalog
// to decide on and, once the structure stage has passed the request, whether
// Delegation-Chain can be honoured.

// echoedFields are the request fields the front door copies into its
// response (Agent-ID, Task-ID and Request-ID, core §5.5.4) or into the
// Attribution-Record (those and Session-ID), each with the longest value it
// takes and the reason the wire stage refuses a longer one with
// (docs/decisions.md#D-echoed-fields). The bounds keep a response, echoes
// and record included, readable under the default header-section limit, and
// the record's claims under auditsvc's bound.
var echoedFields = [...]struct {
	name   string
	max    int
	reason string // "": refused by a later stage, never echoed meanwhile
}{
	// A canonical Agent-ID has a fixed length. A longer one is malformed,
	// which the caller stage answers 401 like any other malformed
	// Agent-ID (core §5.6, §6.5.1).
	{agtp.HeaderAgentID, agtp.CanonicalIDLen, ""},
	{agtp.HeaderTaskID, maxTaskIDLen, agtp.ReasonInvalidHeader},
	// An opaque correlation identifier, like Task-ID.
	{agtp.HeaderRequestID, maxTaskIDLen, agtp.ReasonInvalidHeader},
	{agtp.HeaderSessionID, sessionbind.MaxLength, sessionbind.ReasonInvalid},
}

// echoBound is the longest value of the echoed field name the front door
// takes, -1 for a field it does not echo.
func echoBound(name string) int {
	for i := range echoedFields {
		if echoedFields[i].name == name {
			return echoedFields[i].max
		}
	}
	return -1
}

// echoed is the request's value of the echoed field name, and whether it
// may be echoed or recorded: not when it is absent or over its bound. The
// wire stage refuses a request with a value over its bound, and its answer,
// like the transport's own (RespondError), leaves that value out.
func echoed(h agtp.Header, name string) (string, bool) {
	v, ok := h.Lookup(name)
	if !ok || len(v) > echoBound(name) || !agtp.PrintableASCII(v) {
		return "", false
	}
	return v, true
}

// wire refuses a request with an echoed field over its bound, and one the
// front door cannot decide yet: no catalog snapshot has arrived.
func (p *Pipeline) wire(x *exchange) *agtp.Response {
	x.state = p.Catalog.Current()
	if resp := checkEchoedFields(x); resp != nil {
		return resp
	}
	if x.state == nil {
		return x.fail(agtp.StatusUnavailable, "catalog-unavailable", "the front door has not received the method catalog yet; retry shortly", nil)
	}
	return nil
}

// checkEchoedFields refuses a request carrying an echoed field (every line
// of it, should it be repeated) longer than its bound or with a byte that
// is not printable ASCII: 400 with the field's reason, and a body naming
// the field (and the bound). It runs before any stage acts, so no handler
// runs for a request whose record could not be signed.
func checkEchoedFields(x *exchange) *agtp.Response {
	for _, f := range x.req.Header {
		for i := range echoedFields {
			e := &echoedFields[i]
			if e.reason == "" || len(f.Name) != len(e.name) || agtp.CanonicalName(f.Name) != e.name {
				continue
			}
			switch {
			case len(f.Value) > e.max:
				return x.fail(agtp.StatusBadRequest, e.reason,
					e.name+" is "+strconv.Itoa(len(f.Value))+" bytes long; this server takes at most "+strconv.Itoa(e.max)+" bytes",
					map[string]any{"field": e.name, "max_bytes": e.max})
			case !agtp.PrintableASCII(f.Value):
				return x.fail(agtp.StatusBadRequest, e.reason,
					e.name+" must be printable ASCII: it is recorded in the Attribution-Record",
					map[string]any{"field": e.name})
			}
		}
	}
	return nil
}

// delegation refuses Delegation-Chain while delegation is off (core
// §5.5.3). It runs once the structural decision has passed: a request
// with an illegal method or path gets the code that says what to fix
// (459, 460, 405, 404), not 501 for a header that would not have helped.
func (p *Pipeline) delegation(x *exchange) *agtp.Response {
	if _, ok := x.req.Header.Lookup(agtp.HeaderDelegationChain); ok && !p.opts.DelegationEnabled {
		return x.fail(agtp.StatusNotImplemented, "delegation-unsupported",
			"this server does not support Delegation-Chain (core §5.5.3); send the request without it", nil)
	}
	return nil
}

var _ transport.ErrorResponder = (*Pipeline)(nil)

// RespondError shapes the responses the transport produces itself
// (malformed requests, 425 in 0-RTT, 503 server-busy, and the 500 of a
// panic or a response the writer refused that the pipeline could not
// sign): the same stable fields as every response, a Response-ID, and
// catalog_version on 459. It must not block, so it makes no network
// call: the Attribution-Record is an unsigned, unchained record marked
// wire_error (internal_error on a 500), which no verifier takes for an
// authoritative one. A flood of garbage therefore costs the audit
// chain nothing.
func (p *Pipeline) RespondError(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request, perr *agtp.ProtocolError) *agtp.Response {
	if req == nil {
		req = &agtp.Request{}
	}
	x := &exchange{ctx: ctx, start: time.Now(), conn: conn, req: req, state: p.Catalog.Current()}
	extra := map[string]any{}
	if perr.Status == agtp.StatusMethodViolation {
		extra["method"] = req.Method
		if x.state != nil {
			extra["catalog_version"] = x.state.Snapshot.GetCatalogVersion()
		}
	}
	resp := x.fail(perr.Status, perr.Reason, perr.Explanation, extra)
	p.stampStable(x, resp)
	p.stampPerResponse(x, resp)
	responseID := answer.NewID()
	resp.Header.Set(agtp.HeaderResponseID, responseID)
	marker := "wire_error"
	if perr.Status == agtp.StatusServerError {
		// The transport's 500 after a panic of the record stage, or for a
		// response its writer refused (docs/decisions.md#D-internal-error).
		marker = "internal_error"
	}
	if jws, auditID := p.unchainedRecord(x, resp, responseID, marker); jws != "" {
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, auditID)
	}
	p.metrics.record(x, perr.Status)
	return resp
}
