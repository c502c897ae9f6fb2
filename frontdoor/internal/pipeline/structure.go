package pipeline

import (
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/services/agtp"
)

// The structure stage (docs/decisions.md#D-decision-order steps 2–8):
// method lexicon, alias, catalog membership, path grammar, redirects,
// method policy and endpoint lookup, all decided by the compiled route
// table of the local catalog snapshot (catalogsvc/route) without a network
// call. An unmatched request gets its 404 or 405 here, before its caller is
// resolved, unless it presents a contract, asks for RCNS or names a
// session: those take the contract route (contracts.go), which ends in the
// same structural answer when no contract serves them
// (docs/decisions.md#D-decision-order).

// structure matches the request to an endpoint, or answers it: 459, 460,
// 405 or 404. nil with x.matched unset leaves an unmatched request to the
// contract route.
func (p *Pipeline) structure(x *exchange) *agtp.Response {
	x.state.Table.DecideInto(&x.decision, x.req.Method, x.req.Path)
	if x.decision.Outcome == route.Matched || p.quoteOnPath(x) {
		x.matched = true
		return nil
	}
	if p.contractEligible(x) {
		return nil
	}
	return p.structuralFailure(x)
}

// structuralFailure is the answer of an unmatched request, with the body
// members AGTP-API §11 requires of each code
// (docs/decisions.md#D-error-body).
func (p *Pipeline) structuralFailure(x *exchange) *agtp.Response {
	d := &x.decision
	extra := map[string]any{}
	switch d.Outcome {
	case route.MethodViolation:
		extra["method"] = d.RequestedMethod
		extra["catalog_version"] = d.CatalogVersion
	case route.EndpointViolation:
		extra["segment"] = d.Segment
		extra["path"] = x.req.Path
	case route.MethodNotAllowed:
		extra["method"] = d.Method
		extra["path"] = d.Path
		extra["allowed_methods_for_path"] = d.AllowedMethods
		extra["redirects_for_path"] = d.Redirects
	case route.NotFound:
		extra["path"] = d.Path
	}
	return x.fail(d.Status(), d.Reason, d.Explanation(), extra)
}

// quoteFunction is the built-in QUOTE's registered function.
const quoteFunction = builtinPrefix + "quote"

// quoteOnPath matches QUOTE /path (standard methods §5.1; companions
// assertion 24): QUOTE's built-in estimates a call on any registered path,
// so a QUOTE on a path that exposes other methods but no QUOTE of its own
// is matched to the built-in QUOTE /, with the request's path and query
// naming the quoted call (x.quoteTarget). An operator's QUOTE endpoint on
// the path is matched before this; a path no endpoint has stays 404, and a
// QUOTE the method policy refuses stays 405.
func (p *Pipeline) quoteOnPath(x *exchange) bool {
	d := &x.decision
	if d.Method != "QUOTE" || d.Outcome != route.MethodNotAllowed || d.Reason != route.ReasonMethodNotAllowed {
		return false
	}
	var root route.Decision
	x.state.Table.DecideInto(&root, x.req.Method, "/")
	if root.Outcome != route.Matched || root.Endpoint.Proto.GetHandlerName() != quoteFunction {
		return false
	}
	*d = root
	x.quoteTarget = true
	return true
}
