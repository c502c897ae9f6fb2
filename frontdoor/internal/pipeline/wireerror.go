package pipeline

import (
	"context"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

var _ transport.ErrorResponder = (*Pipeline)(nil)

// RespondError shapes the responses the transport produces itself
// (malformed requests, 425 in 0-RTT, 503 server-busy): the same stable
// fields as every response, and catalog_version on 459. It must not
// block, so it makes no network call: the Attribution-Record is an
// unsigned, unchained record marked wire_error, which no verifier takes
// for an authoritative one. A flood of garbage therefore costs the audit
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
	responseID := newResponseID()
	resp.Header.Set(agtp.HeaderResponseID, responseID)
	if jws, auditID := p.unchainedRecord(x, resp, responseID, "wire_error"); jws != "" {
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, auditID)
	}
	p.metrics.record(x, perr.Status)
	return resp
}
