package pipeline

import (
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/services/agtp"
)

// dependencyFailure answers a failed call to an internal service. The
// service's own AGTP reason (from grpcerr) is passed on for refusals; an
// unreachable service is a 503 naming which part is missing; internal
// details are logged and masked.
func (p *Pipeline) dependencyFailure(x *exchange, service string, err error) *agtp.Response {
	f := answer.Dependency(x.ctx, p.Log, service, err)
	return x.fail(f.Status, f.Reason, f.Explanation, f.Extra)
}
