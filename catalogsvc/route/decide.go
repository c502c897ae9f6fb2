package route

import (
	"fmt"
	"strings"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Outcome is the kind of structural decision.
type Outcome uint8

// Outcomes, in the order a request can fail
// (docs/decisions.md#D-decision-order).
const (
	// Matched: the request reached an endpoint.
	Matched Outcome = iota + 1
	// MethodViolation is 459: the method is malformed or not admitted.
	MethodViolation
	// EndpointViolation is 460: the path breaks the grammar.
	EndpointViolation
	// MethodNotAllowed is 405: policy refuses the method, or the path is
	// registered under other methods only.
	MethodNotAllowed
	// NotFound is 404: no endpoint has this path.
	NotFound
)

// Status is the AGTP status code of the outcome (0 for Matched).
func (o Outcome) Status() int {
	switch o {
	case MethodViolation:
		return agtp.StatusMethodViolation
	case EndpointViolation:
		return agtp.StatusEndpointViolation
	case MethodNotAllowed:
		return agtp.StatusMethodNotAllowed
	case NotFound:
		return agtp.StatusNotFound
	}
	return 0
}

// Proto is the ResolveRoute enum value of the outcome.
func (o Outcome) Proto() catalogv1.RouteOutcome {
	switch o {
	case Matched:
		return catalogv1.RouteOutcome_ROUTE_OUTCOME_MATCHED
	case MethodViolation:
		return catalogv1.RouteOutcome_ROUTE_OUTCOME_METHOD_VIOLATION
	case EndpointViolation:
		return catalogv1.RouteOutcome_ROUTE_OUTCOME_ENDPOINT_VIOLATION
	case MethodNotAllowed:
		return catalogv1.RouteOutcome_ROUTE_OUTCOME_METHOD_NOT_ALLOWED
	case NotFound:
		return catalogv1.RouteOutcome_ROUTE_OUTCOME_NOT_FOUND
	}
	return catalogv1.RouteOutcome_ROUTE_OUTCOME_UNSPECIFIED
}

// AGTP reason tokens of the failures Decide reports. 460 reasons are the
// Rule* constants of the grammar.
const (
	ReasonMethodInvalid      = agtp.ReasonMethodInvalid // 459, lexical
	ReasonMethodNotInCatalog = "method-not-in-catalog"  // 459, membership
	ReasonMethodDisallowed   = "method-disallowed"      // 405, policy
	ReasonMethodNotAllowed   = "method-not-allowed"     // 405, registry
	ReasonNotFound           = "not-found"              // 404
)

// Param is one template parameter bound by the match.
type Param struct {
	Name  string
	Value string
}

// Decision is the structural decision for one request. Slices and maps in
// it are shared with the Table and must not be modified.
type Decision struct {
	Outcome Outcome
	// Reason is the AGTP reason token of a failure; empty when matched.
	Reason string
	// RequestedMethod is the method as it arrived on the wire; it differs
	// from Method when an alias, a legacy mapping or a redirect applied
	// (the Attribution-Record's requested_method, AGTP-API §9.2).
	RequestedMethod string
	// Method is the method the request is handled as.
	Method string
	// Path is the path the request is handled as (query removed, redirect
	// applied); template parameters are not substituted.
	Path string
	// Aliased, Redirected and Legacy say which rewrites applied.
	Aliased    bool
	Redirected bool
	Legacy     bool
	// LegacyAction is the AGTP-API §3.6 hint of a legacy verb: "replace"
	// (PUT), "delete" (DELETE), "modify" (PATCH), or "".
	LegacyAction string
	// Endpoint is the matched endpoint.
	Endpoint *Endpoint
	// CatalogWarning is the AGTP-Catalog-Warning value when the method is
	// deprecated; it applies to every response, failures included.
	CatalogWarning string
	// EndpointWarning is the AGTP-Endpoint-Warning value when the matched
	// endpoint is deprecated.
	EndpointWarning string
	// Segment is the offending segment of a 460 (or the whole path when it
	// is not absolute).
	Segment string
	// AllowedMethods and Redirects are the 405 body's
	// allowed_methods_for_path and redirects_for_path (never nil on 405).
	AllowedMethods []string
	Redirects      map[string]string
	// CatalogVersion is the catalog version in use (the 459 body cites it).
	CatalogVersion string

	params  [MaxParams]Param
	nparams int
}

// Params returns the bound template parameters in path order.
func (d *Decision) Params() []Param { return d.params[:d.nparams] }

// Param returns one bound template parameter.
func (d *Decision) Param(name string) (string, bool) {
	for _, p := range d.params[:d.nparams] {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// Status is the AGTP status of a failure, 0 when matched.
func (d *Decision) Status() int { return d.Outcome.Status() }

// Explanation is a human sentence for the failure's error body.
func (d *Decision) Explanation() string {
	switch d.Outcome {
	case MethodViolation:
		if d.Reason == ReasonMethodInvalid {
			return fmt.Sprintf("method %q does not match ^[A-Z]{3,32}$", d.RequestedMethod)
		}
		return fmt.Sprintf("method %s is not in the method catalog %s and is not declared by this server", d.Method, d.CatalogVersion)
	case EndpointViolation:
		switch d.Reason {
		case RuleTrailingSlash:
			return "a path must not end with / unless it is exactly /"
		case RuleMethodInPath:
			return fmt.Sprintf("path segment %q is a method name; put the verb on the request line", d.Segment)
		case RulePathNotAbsolute:
			return "a path must begin with /"
		}
		return fmt.Sprintf("path segment %q breaks the path grammar", d.Segment)
	case MethodNotAllowed:
		if d.Reason == ReasonMethodDisallowed {
			return fmt.Sprintf("this server's method policy does not accept %s", d.Method)
		}
		return fmt.Sprintf("%s is not exposed on %s", d.Method, d.Path)
	case NotFound:
		return fmt.Sprintf("no endpoint has the path %s", d.Path)
	}
	return ""
}

// Decide makes the structural decision for (method, target). target is
// the request-target: anything from the first '?' on is the query and is
// ignored here (AGTP-API §5.5). A '#' is the wire layer's 400 and must
// not reach Decide.
func (t *Table) Decide(method, target string) Decision {
	var d Decision
	t.DecideInto(&d, method, target)
	return d
}

// DecideInto is Decide writing into d, for callers that reuse a Decision.
func (t *Table) DecideInto(d *Decision, method, target string) {
	*d = Decision{RequestedMethod: method, Method: method, CatalogVersion: t.catalogVersion}
	path := target
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	d.Path = path

	// 459: lexical rule, one alias hop, membership
	// (docs/decisions.md#D-decision-order, steps 2-4).
	if !agtp.ValidMethodToken(method) {
		d.Outcome, d.Reason = MethodViolation, ReasonMethodInvalid
		return
	}
	eff := method
	if a, ok := t.aliases[method]; ok {
		eff, d.Aliased = a, true
	}
	mi := t.methods[eff]
	d.Method = eff
	if mi == nil {
		d.Outcome, d.Reason = MethodViolation, ReasonMethodNotInCatalog
		return
	}
	if mi.legacy {
		d.Legacy, d.LegacyAction = true, mi.action
		eff = mi.target
		mi = t.methods[eff]
		d.Method = eff
	}
	d.CatalogWarning = mi.warning

	// 460: structure and characters (step 5).
	var segs [MaxSegments]string
	n, deep, rule, bad := splitPath(path, &segs)
	if rule != "" {
		d.Outcome, d.Reason, d.Segment = EndpointViolation, rule, bad
		return
	}

	// From here on the path is found by its decoded key, so that /%72oom
	// is /room to redirects, lookup and the 405 body alike. A path deeper
	// than MaxSegments gets the impossible key "": segs holds only its
	// first MaxSegments segments, which must not stand for it.
	var key string
	if !deep {
		key = exactKey(path, segs[:n])
	}

	// Redirect (step 6): one hop, handled as if the target had been sent.
	lookKey, lookSegs := key, segs[:n]
	if t.redirects != nil {
		if rd := t.redirectFor(eff, key); rd != nil {
			d.Redirected = true
			eff = rd.toMethod
			mi = t.methods[eff]
			d.Method, d.CatalogWarning = eff, mi.warning
			if rd.toPath != "" {
				lookKey, lookSegs, deep = rd.toKey, rd.toSegs, false
				d.Path = rd.toPath
			}
		}
	}

	var ep *Endpoint
	if !deep {
		ep = t.lookup(d, eff, lookKey, lookSegs)
	}
	// The verb-leak check only has work to do when the request did not
	// reach an endpoint through its own path: a registered literal never
	// equals a method (New refuses it) and parameter segments are exempt.
	if ep == nil || d.Redirected {
		if seg, leak := t.leak(path, key, segs[:n], deep); leak {
			d.reset()
			d.Outcome, d.Reason, d.Segment = EndpointViolation, RuleMethodInPath, seg
			return
		}
	}

	// 405 by policy (step 7).
	if mi.denied {
		d.reset()
		d.Outcome, d.Reason = MethodNotAllowed, ReasonMethodDisallowed
		d.AllowedMethods, d.Redirects = t.allowedFor(lookKey, lookSegs, deep), t.redirectsFor(lookKey)
		return
	}
	if ep == nil {
		d.reset()
		if allowed := t.allowedFor(lookKey, lookSegs, deep); len(allowed) > 0 {
			d.Outcome, d.Reason = MethodNotAllowed, ReasonMethodNotAllowed
			d.AllowedMethods, d.Redirects = allowed, t.redirectsFor(lookKey)
			return
		}
		d.Outcome, d.Reason = NotFound, ReasonNotFound
		return
	}
	d.Outcome = Matched
	d.Endpoint = ep
	d.EndpointWarning = ep.Warning
}

// reset drops what a tentative match wrote.
func (d *Decision) reset() {
	d.Endpoint = nil
	d.nparams = 0
}

// splitPath checks the path against AGTP-API §5.1-§5.2 and splits it into
// percent-decoded segments. deep reports more segments than any template
// can have; those are validated but not stored.
func splitPath(path string, segs *[MaxSegments]string) (n int, deep bool, rule, bad string) {
	if path == "" || path[0] != '/' {
		return 0, false, RulePathNotAbsolute, path
	}
	if path == "/" {
		return 0, false, "", ""
	}
	if path[len(path)-1] == '/' {
		last := path[:len(path)-1]
		return 0, false, RuleTrailingSlash, last[strings.LastIndexByte(last, '/')+1:] + "/"
	}
	rest := path[1:]
	for {
		raw := rest
		i := strings.IndexByte(rest, '/')
		if i >= 0 {
			raw, rest = rest[:i], rest[i+1:]
		}
		enc, ok := checkSegment(raw)
		if !ok {
			return 0, false, RulePathMalformed, raw
		}
		if n < MaxSegments {
			if enc {
				segs[n] = decodeSegment(raw)
			} else {
				segs[n] = raw
			}
			n++
		} else {
			deep = true
		}
		if i < 0 {
			return n, deep, "", ""
		}
	}
}

// redirectFor finds the redirect of (method, key), key being the path's
// exactKey: one scoped to the path wins over one on every path.
func (t *Table) redirectFor(method, key string) *redirect {
	if m := t.pathRedirect[key]; m != nil {
		if rd := m[method]; rd != nil {
			return rd
		}
	}
	return t.anyRedirect[method]
}

// lookup finds the endpoint for (method, path), given as its exactKey and
// decoded segments: exact match first, then the template with the fewest
// parameters (AGTP-API §5.4). It binds the template parameters into d.
func (t *Table) lookup(d *Decision, method, key string, segs []string) *Endpoint {
	if lf := t.exact[key]; lf != nil {
		if ep := lf.byMethod[method]; ep != nil {
			return ep
		}
	}
	if len(segs) == 0 || len(segs) > t.maxDepth {
		return nil
	}
	s := search{method: method, bestN: MaxParams + 1, anyN: -1}
	s.visit(&t.root, segs, 0, 0)
	if s.best == nil {
		return nil
	}
	ep := s.best.byMethod[method]
	for i, sg := range ep.Template.Segments {
		if sg.IsParam() {
			d.params[d.nparams] = Param{Name: sg.Param, Value: segs[i]}
			d.nparams++
		}
	}
	return ep
}

// exactKey is the exact-match key of a request path: the path itself when
// no segment was percent-encoded (the common case, no allocation),
// otherwise the decoded segments joined. A decoded segment holding '/'
// cannot equal any registered literal, so it yields an impossible key.
func exactKey(path string, segs []string) string {
	if strings.IndexByte(path, '%') < 0 {
		return path
	}
	var b strings.Builder
	for _, s := range segs {
		if strings.IndexByte(s, '/') >= 0 {
			return ""
		}
		b.WriteByte('/')
		b.WriteString(s)
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// search walks the template trie. With method set it finds the matching
// template with the fewest parameters that has that method (best); with
// anyN >= 0 it also finds the one with the fewest parameters whatever its
// methods (anyBest). Templates that tie on parameter count never both
// match (New refuses them), so "fewest" is unique.
type search struct {
	method  string
	best    *leaf
	bestN   int
	anyBest *leaf
	anyN    int // -1: not wanted
	all     []*leaf
	collect bool
}

func (s *search) visit(nd *node, segs []string, i, np int) {
	if i == len(segs) {
		lf := nd.leaf
		if lf == nil {
			return
		}
		if s.collect {
			s.all = append(s.all, lf)
		}
		if s.method != "" && np < s.bestN && lf.byMethod[s.method] != nil {
			s.best, s.bestN = lf, np
		}
		if s.anyN >= 0 && (s.anyBest == nil || np < s.anyN) {
			s.anyBest, s.anyN = lf, np
		}
		return
	}
	if !s.collect && np >= s.bestN && (s.anyN < 0 || (s.anyBest != nil && np >= s.anyN)) {
		return
	}
	if nd.lit != nil {
		if c := nd.lit[segs[i]]; c != nil {
			s.visit(c, segs, i+1, np)
		}
	}
	if nd.param != nil && segs[i] != "" {
		s.visit(nd.param, segs, i+1, np+1)
	}
}

// leak runs the runtime verb-leak check on the request path (AGTP-API
// §5.1): every decoded segment is compared with the method names, except
// segments that bind to a {param} of the path's best match. key is the
// path's exactKey.
func (t *Table) leak(path, key string, segs []string, deep bool) (string, bool) {
	var exempt *Template
	if !deep && len(segs) > 0 && t.exact[key] == nil && len(segs) <= t.maxDepth {
		s := search{bestN: 0, anyN: MaxParams + 1}
		s.visit(&t.root, segs, 0, 0)
		if s.anyBest != nil {
			for _, ep := range s.anyBest.byMethod {
				exempt = ep.Template
				break
			}
		}
	}
	if !deep {
		for i, sg := range segs {
			if exempt != nil && exempt.Segments[i].IsParam() {
				continue
			}
			if t.verbs.Leaks(sg) {
				return rawSegment(path, i), true
			}
		}
		return "", false
	}
	rest := path[1:]
	for rest != "" {
		raw := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			raw, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		if dec, ok := DecodeSegment(raw); ok && t.verbs.Leaks(dec) {
			return raw, true
		}
	}
	return "", false
}

// rawSegment returns the i-th segment of path as it arrived.
func rawSegment(path string, i int) string {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

// allowedFor is the 405 body's allowed_methods_for_path: the methods
// registered on every endpoint the path (its exactKey and decoded
// segments) matches, minus those the policy refuses.
func (t *Table) allowedFor(key string, segs []string, deep bool) []string {
	var leaves []*leaf
	if lf := t.exact[key]; lf != nil {
		leaves = append(leaves, lf)
	}
	if !deep && len(segs) > 0 && len(segs) <= t.maxDepth {
		s := search{bestN: 0, anyN: -1, collect: true}
		s.visit(&t.root, segs, 0, 0)
		leaves = append(leaves, s.all...)
	}
	return t.sortedMethods(leaves)
}

// redirectsFor is the 405 body's redirects_for_path: redirects whose
// from_path is the path (compared by exactKey, as redirectFor does) or
// that apply on every path.
func (t *Table) redirectsFor(key string) map[string]string {
	out := map[string]string{}
	for _, rd := range t.redirects {
		if rd.fromPath == "" || rd.fromKey == key {
			if _, set := out[rd.fromMethod]; !set || rd.fromPath != "" {
				out[rd.fromMethod] = rd.toMethod
			}
		}
	}
	return out
}
