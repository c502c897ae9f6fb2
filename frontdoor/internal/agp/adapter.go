package agp

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
)

// A stock AGP client sends an adapter's request object (the SDK's
// {"items": [...], "amount_cents": 2995}), not an AGTP method and path.
// The business's endpoints declare which requests are theirs
// (endpoint.AGPMapping, docs/agp.md "Adapter requests"); bind picks the
// one a request is for and turns the request into its AGTP call.

// CodeAmbiguous: an adapter request fits several endpoints equally well.
const CodeAmbiguous = "AMBIGUOUS_REQUEST"

// bind resolves an adapter-form target against the business: of the
// endpoints of the operation whose declaration selects the request, the
// most specific; its path parameters are filled from the input. A target
// that names its call already is left as it is.
func (b *business) bind(op string, t *target) *apiError {
	if t.Adapter == nil {
		return nil
	}
	var best []*endpoint.Endpoint
	top := -1
	for _, ep := range b.Endpoints {
		if operationOf(ep) != op {
			continue
		}
		n, ok := ep.Def.AGP.Selects(t.Adapter)
		switch {
		case !ok || n < top:
		case n > top:
			best, top = []*endpoint.Endpoint{ep}, n
		default:
			best = append(best, ep)
		}
	}
	switch len(best) {
	case 0:
		return &apiError{Status: http.StatusBadRequest, Code: CodeCapabilityNotFound, Error: "Capability not found",
			Message: fmt.Sprintf("No %s capability of business %q takes this request; POST /agp/discover lists what each endpoint's request needs (data.endpoints.*.request).", op, b.ID),
			Details: map[string]any{}}
	case 1:
	default:
		keys := make([]string, len(best))
		for i, ep := range best {
			keys[i] = ep.Def.Key()
		}
		slices.Sort(keys)
		return &apiError{Status: http.StatusBadRequest, Code: CodeAmbiguous, Error: "Ambiguous request",
			Message: fmt.Sprintf("The request fits %s equally; add the members that tell them apart.", strings.Join(keys, " and ")),
			Details: map[string]any{"endpoints": keys}}
	}
	ep := best[0]
	in, err := ep.Def.AGP.Input(t.Adapter)
	if err != nil {
		return validation("The request does not map onto "+ep.Def.Key()+": "+err.Error()+".", map[string]any{"endpoint": ep.Def.Key()})
	}
	path, err := recipe.FillPath(ep.Def.Path, in)
	if err != nil {
		return validation("The request gives no value for a path parameter of "+ep.Def.Key()+".", map[string]any{"endpoint": ep.Def.Key(), "pathParameters": ep.Template.Params})
	}
	if !validTarget(path) || len(path) > 2048 {
		return validation("The request's path values do not make a valid path for "+ep.Def.Key()+".", map[string]any{"endpoint": ep.Def.Key()})
	}
	for _, name := range ep.Template.Params {
		delete(in, name)
	}
	t.Method, t.Path, t.Params = ep.Def.Method, path, in
	return nil
}
