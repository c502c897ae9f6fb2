package pipeline

import (
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"google.golang.org/grpc/codes"
)

// dependencyFailure answers a failed call to an internal service. The
// service's own AGTP reason (from grpcerr) is passed on for refusals; an
// unreachable service is a 503 naming which part is missing; internal
// details are logged and masked.
func (p *Pipeline) dependencyFailure(x *exchange, service string, err error) *agtp.Response {
	code, reason, explanation, meta := grpcerr.Reason(err)
	status := grpcerr.StatusFor(code)
	switch {
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled:
		p.Log.WarnContext(x.ctx, "internal service unavailable", "service", service, "error", err)
		return x.fail(agtp.StatusUnavailable, service+"-unavailable",
			"a part of this server ("+service+") is not reachable; retry shortly", nil)
	case status >= 500:
		p.Log.ErrorContext(x.ctx, "internal service failed", "service", service, "error", err)
		return x.fail(agtp.StatusServerError, "internal", "the request failed inside the server", nil)
	}
	extra := map[string]any{}
	for k, v := range meta {
		extra[k] = v
	}
	return x.fail(status, reason, explanation, extra)
}
