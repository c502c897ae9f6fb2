package route

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalogdata"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// fixtureMethods is the fixture catalog of the api conformance assertions
// (e2e/README.md): the floor plus BOOK, RESERVE, AUDIT (deprecated,
// successor RECORD, removed in 2.0.0), RECORD, FETCH, CREATE, REPLACE,
// REMOVE, MODIFY, SEARCH, SCHEDULE, TRANSFER, and ARCHIVE (deprecated
// without successor or removal version).
func fixtureMethods() []*catalogv1.Method {
	var ms []*catalogv1.Method
	for _, f := range agtp.FloorMethods() {
		ms = append(ms, &catalogv1.Method{Name: f, Floor: true})
	}
	for _, v := range []string{"BOOK", "RESERVE", "RECORD", "FETCH", "CREATE", "REPLACE", "REMOVE", "MODIFY", "SEARCH", "SCHEDULE", "TRANSFER", "CANCEL"} {
		ms = append(ms, &catalogv1.Method{Name: v})
	}
	ms = append(ms,
		&catalogv1.Method{Name: "AUDIT", DeprecatedIn: "1.2.0", RemovedIn: "2.0.0", Successor: "RECORD"},
		&catalogv1.Method{Name: "ARCHIVE", DeprecatedIn: "1.2.0"},
	)
	return ms
}

func ep(method, path string) *catalogv1.Endpoint {
	return &catalogv1.Endpoint{Method: method, Path: path, Tier: catalogv1.EndpointTier_ENDPOINT_TIER_B}
}

func fixtureEndpoints() []*catalogv1.Endpoint {
	dep := ep("QUERY", "/old-rooms")
	dep.Deprecated = true
	dep.DeprecationMessage = "deprecated; successor=RESERVE /rooms; removed_in=3.0.0"
	return []*catalogv1.Endpoint{
		ep("QUERY", "/catalog"),
		ep("FETCH", "/catalog"),
		ep("BOOK", "/room"),
		ep("RESERVE", "/room"),
		ep("QUERY", "/customers/{customer_id}"),
		ep("QUERY", "/customers/me"),
		ep("SEARCH", "/items"),
		ep("AUDIT", "/ledger"),
		ep("ARCHIVE", "/ledger"),
		ep("FROB", "/gadgets"),
		dep,
		{Method: "DISCOVER", Path: "/", Tier: catalogv1.EndpointTier_ENDPOINT_TIER_A},
		{Method: "DISCOVER", Path: "/methods", Tier: catalogv1.EndpointTier_ENDPOINT_TIER_A},
	}
}

func defaultAliases() map[string]string {
	return map[string]string{"GET": "FETCH", "POST": "CREATE", "PUT": "REPLACE", "DELETE": "REMOVE", "PATCH": "MODIFY"}
}

type fixture struct {
	methods   []*catalogv1.Method
	endpoints []*catalogv1.Endpoint
	policy    *catalogv1.MethodPolicy
}

func newFixture() *fixture {
	ms := append(fixtureMethods(), &catalogv1.Method{Name: "FROB", Custom: true})
	return &fixture{
		methods:   ms,
		endpoints: fixtureEndpoints(),
		policy:    &catalogv1.MethodPolicy{Allow: []string{"*"}, Aliases: defaultAliases(), Custom: []string{"FROB"}},
	}
}

func (f *fixture) table(t testing.TB) *Table {
	t.Helper()
	tb, err := New(&catalogv1.Snapshot{Revision: 7, CatalogVersion: "1.0.0", Methods: f.methods, Endpoints: f.endpoints, MethodPolicy: f.policy})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tb
}

type want struct {
	outcome Outcome
	reason  string
	method  string
	path    string
	segment string
	params  map[string]string
	catWarn string
	epWarn  string
	allowed []string
	redirs  map[string]string
}

func check(t *testing.T, d Decision, w want) {
	t.Helper()
	if d.Outcome != w.outcome {
		t.Fatalf("outcome = %d (%s), want %d", d.Outcome, d.Reason, w.outcome)
	}
	if w.reason != "" && d.Reason != w.reason {
		t.Errorf("reason = %q, want %q", d.Reason, w.reason)
	}
	if w.method != "" && d.Method != w.method {
		t.Errorf("method = %q, want %q", d.Method, w.method)
	}
	if w.path != "" && (d.Endpoint == nil || d.Endpoint.Template.Raw != w.path) {
		t.Errorf("endpoint = %v, want path %s", d.Endpoint, w.path)
	}
	if w.segment != "" && d.Segment != w.segment {
		t.Errorf("segment = %q, want %q", d.Segment, w.segment)
	}
	for k, v := range w.params {
		if got, _ := d.Param(k); got != v {
			t.Errorf("param %s = %q, want %q", k, got, v)
		}
	}
	if d.CatalogWarning != w.catWarn {
		t.Errorf("catalog warning = %q, want %q", d.CatalogWarning, w.catWarn)
	}
	if d.EndpointWarning != w.epWarn {
		t.Errorf("endpoint warning = %q, want %q", d.EndpointWarning, w.epWarn)
	}
	if w.allowed != nil && !slices.Equal(d.AllowedMethods, w.allowed) {
		t.Errorf("allowed = %v, want %v", d.AllowedMethods, w.allowed)
	}
	if w.redirs != nil {
		if d.Redirects == nil || len(d.Redirects) != len(w.redirs) {
			t.Errorf("redirects = %v, want %v", d.Redirects, w.redirs)
		}
		for k, v := range w.redirs {
			if d.Redirects[k] != v {
				t.Errorf("redirects = %v, want %v", d.Redirects, w.redirs)
			}
		}
	}
}

const auditWarning = "deprecated; successor=RECORD; removed_in=2.0.0"

// TestDecideDigestAPI pins the api assertions about methods,
// catalog, policy, grammar and matching (numbers in the names).
func TestDecideDigestAPI(t *testing.T) {
	redirect := &catalogv1.Redirect{FromMethod: "BOOK", FromPath: "/room", ToMethod: "RESERVE", ToPath: "/room"}
	tests := []struct {
		name   string
		setup  func(*fixture)
		method string
		target string
		want   want
	}{
		{name: "01 unknown method FROBNICATE gets 459 naming it", method: "FROBNICATE", target: "/catalog",
			want: want{outcome: MethodViolation, reason: ReasonMethodNotInCatalog, method: "FROBNICATE"}},
		{name: "03 lowercase query gets 459", method: "query", target: "/catalog",
			want: want{outcome: MethodViolation, reason: ReasonMethodInvalid}},
		{name: "04 two letters GO gets 459", method: "GO", target: "/catalog",
			want: want{outcome: MethodViolation, reason: ReasonMethodInvalid}},
		{name: "04 thirty-three letters gets 459", method: strings.Repeat("A", 33), target: "/catalog",
			want: want{outcome: MethodViolation, reason: ReasonMethodInvalid}},
		{name: "05 underscore AUDIT_LEGACY gets 459", method: "AUDIT_LEGACY", target: "/catalog",
			want: want{outcome: MethodViolation, reason: ReasonMethodInvalid}},
		{name: "05 hyphen X-NEGOTIATE gets 459", method: "X-NEGOTIATE", target: "/catalog",
			want: want{outcome: MethodViolation, reason: ReasonMethodInvalid}},
		{name: "07 deprecated AUDIT is served with the catalog warning", method: "AUDIT", target: "/ledger",
			want: want{outcome: Matched, path: "/ledger", catWarn: auditWarning}},
		{name: "08 deprecated verb without successor has no successor in the warning", method: "ARCHIVE", target: "/ledger",
			want: want{outcome: Matched, catWarn: "deprecated"}},
		{name: "09 a verb that is not deprecated has no catalog warning", method: "QUERY", target: "/catalog",
			want: want{outcome: Matched, path: "/catalog"}},
		{name: "catalog warning also rides on failures", method: "AUDIT", target: "/nowhere",
			want: want{outcome: NotFound, catWarn: auditWarning}},
		{name: "11 default alias GET is handled as FETCH", method: "GET", target: "/catalog",
			want: want{outcome: Matched, method: "FETCH", path: "/catalog"}},
		{name: "12 no aliases and legacy NONE: GET gets 459",
			setup:  func(f *fixture) { f.policy.Aliases = nil },
			method: "GET", target: "/catalog", want: want{outcome: MethodViolation, reason: ReasonMethodNotInCatalog}},
		{name: "13 legacy GET opted in is not 459 and maps to QUERY",
			setup:  func(f *fixture) { f.policy.Aliases = nil; f.policy.Legacy = []string{"GET"} },
			method: "GET", target: "/catalog", want: want{outcome: Matched, method: "QUERY", path: "/catalog"}},
		{name: "13 legacy GET opted in leaves POST at 459",
			setup:  func(f *fixture) { f.policy.Aliases = nil; f.policy.Legacy = []string{"GET"} },
			method: "POST", target: "/catalog", want: want{outcome: MethodViolation}},
		{name: "14 custom method bound to an endpoint is dispatched", method: "FROB", target: "/gadgets",
			want: want{outcome: Matched, path: "/gadgets"}},
		{name: "15 disallow SEARCH refuses the registered SEARCH /items with 405",
			setup:  func(f *fixture) { f.policy.Disallow = []string{"SEARCH"} },
			method: "SEARCH", target: "/items", want: want{outcome: MethodNotAllowed, reason: ReasonMethodDisallowed, allowed: []string{}, redirs: map[string]string{}}},
		{name: "16 allow [BOOK] still serves the floor QUERY /catalog",
			setup:  func(f *fixture) { f.policy.Allow = []string{"BOOK"} },
			method: "QUERY", target: "/catalog", want: want{outcome: Matched}},
		{name: "17 allow [BOOK] refuses SEARCH /items with 405",
			setup:  func(f *fixture) { f.policy.Allow = []string{"BOOK"} },
			method: "SEARCH", target: "/items", want: want{outcome: MethodNotAllowed, reason: ReasonMethodDisallowed}},
		{name: "18 redirect BOOK /room is handled as RESERVE /room",
			setup:  func(f *fixture) { f.policy.Redirects = []*catalogv1.Redirect{redirect} },
			method: "BOOK", target: "/room", want: want{outcome: Matched, method: "RESERVE", path: "/room"}},
		{name: "19 redirect without from_path rewrites on every path",
			setup: func(f *fixture) {
				f.policy.Redirects = []*catalogv1.Redirect{{FromMethod: "SCHEDULE", ToMethod: "QUERY"}}
			},
			method: "SCHEDULE", target: "/catalog", want: want{outcome: Matched, method: "QUERY", path: "/catalog"}},
		{name: "20 /book/reserve gets 460 naming book", method: "QUERY", target: "/book/reserve",
			want: want{outcome: EndpointViolation, reason: RuleMethodInPath, segment: "book"}},
		{name: "21 case is ignored: /rooms/Reserve", method: "QUERY", target: "/rooms/Reserve",
			want: want{outcome: EndpointViolation, segment: "Reserve"}},
		{name: "22 hyphen removed: /re-serve", method: "QUERY", target: "/re-serve",
			want: want{outcome: EndpointViolation, segment: "re-serve"}},
		{name: "22 underscore removed: /re_serve", method: "QUERY", target: "/re_serve",
			want: want{outcome: EndpointViolation, segment: "re_serve"}},
		{name: "23 floor verb as segment: /orders/execute", method: "QUERY", target: "/orders/execute",
			want: want{outcome: EndpointViolation, segment: "execute"}},
		{name: "24 trailing slash gets 460", method: "QUERY", target: "/catalog/",
			want: want{outcome: EndpointViolation, reason: RuleTrailingSlash, segment: "catalog/"}},
		{name: "25 DISCOVER / is valid", method: "DISCOVER", target: "/",
			want: want{outcome: Matched, path: "/"}},
		{name: "26 verb plus suffix /booking is 404 not 460", method: "QUERY", target: "/booking",
			want: want{outcome: NotFound}},
		{name: "27 verb words in the query string are not checked", method: "QUERY", target: "/catalog?action=book",
			want: want{outcome: Matched, path: "/catalog"}},
		{name: "29 leaking unregistered path gets 460 not 404", method: "QUERY", target: "/nothing/book",
			want: want{outcome: EndpointViolation, segment: "book"}},
		{name: "30 bad method and leaking path give 459", method: "FROBNICATE", target: "/book/reserve",
			want: want{outcome: MethodViolation}},
		{name: "31 unregistered well-formed path gets 404", method: "QUERY", target: "/nothing",
			want: want{outcome: NotFound, reason: ReasonNotFound}},
		{name: "32-34 RESERVE /catalog gets 405 with allowed methods and empty redirects", method: "RESERVE", target: "/catalog",
			want: want{outcome: MethodNotAllowed, reason: ReasonMethodNotAllowed, allowed: []string{"FETCH", "QUERY"}, redirs: map[string]string{}}},
		{name: "35 405 on /room lists the BOOK->RESERVE redirect",
			setup:  func(f *fixture) { f.policy.Redirects = []*catalogv1.Redirect{redirect} },
			method: "QUERY", target: "/room", want: want{outcome: MethodNotAllowed, allowed: []string{"BOOK", "RESERVE"}, redirs: map[string]string{"BOOK": "RESERVE"}}},
		{name: "36 template binds customer_id", method: "QUERY", target: "/customers/c-17",
			want: want{outcome: Matched, path: "/customers/{customer_id}", params: map[string]string{"customer_id": "c-17"}}},
		{name: "37 literal beats template", method: "QUERY", target: "/customers/me",
			want: want{outcome: Matched, path: "/customers/me"}},
		{name: "38 extra segment gets 404", method: "QUERY", target: "/customers/c-17/extra",
			want: want{outcome: NotFound}},
		{name: "a verb bound to a template parameter is exempt", method: "QUERY", target: "/customers/book",
			want: want{outcome: Matched, path: "/customers/{customer_id}", params: map[string]string{"customer_id": "book"}}},
		{name: "percent-encoded verb /%62ook is decoded before the leak check", method: "QUERY", target: "/%62ook",
			want: want{outcome: EndpointViolation, segment: "%62ook"}},
		{name: "percent-encoded parameter value is decoded", method: "QUERY", target: "/customers/a%20b",
			want: want{outcome: Matched, params: map[string]string{"customer_id": "a b"}}},
		{name: "bad percent-encoding gets 460", method: "QUERY", target: "/customers/%zz",
			want: want{outcome: EndpointViolation, reason: RulePathMalformed, segment: "%zz"}},
		{name: "relative path gets 460", method: "QUERY", target: "catalog",
			want: want{outcome: EndpointViolation, reason: RulePathNotAbsolute}},
		{name: "deprecated endpoint carries the endpoint warning", method: "QUERY", target: "/old-rooms",
			want: want{outcome: Matched, epWarn: "deprecated; successor=RESERVE /rooms; removed_in=3.0.0"}},
		{name: "72 deprecated endpoint on deprecated verb carries both warnings",
			setup: func(f *fixture) {
				d := ep("AUDIT", "/old-ledger")
				d.Deprecated, d.DeprecationMessage = true, "deprecated; successor=RECORD"
				f.endpoints = append(f.endpoints, d)
			},
			method: "AUDIT", target: "/old-ledger", want: want{outcome: Matched, catWarn: auditWarning, epWarn: "deprecated; successor=RECORD"}},
		{name: "floor method cannot be disallowed",
			setup:  func(f *fixture) { f.policy.Disallow = []string{"QUERY"} },
			method: "QUERY", target: "/catalog", want: want{outcome: Matched}},
		{name: "empty inner segment is not matched", method: "QUERY", target: "/customers//x",
			want: want{outcome: NotFound}},
		{name: "very deep path still gets the leak check", method: "QUERY", target: strings.Repeat("/a", MaxSegments+3) + "/book",
			want: want{outcome: EndpointViolation, segment: "book"}},
		{name: "very deep clean path is 404", method: "QUERY", target: strings.Repeat("/a", MaxSegments+3),
			want: want{outcome: NotFound}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			if tc.setup != nil {
				tc.setup(f)
			}
			check(t, f.table(t).Decide(tc.method, tc.target), tc.want)
		})
	}
}

// TestRedirectMatchesPercentEncodedPath: a path-scoped redirect applies
// to the path however it is spelled. The lookup percent-decodes segments
// (/%72oom is /room), so a redirect matched on the raw path would let
// BOOK /%72oom reach the BOOK /room endpoint the redirect takes requests
// away from.
func TestRedirectMatchesPercentEncodedPath(t *testing.T) {
	for _, from := range []string{"/room", "/r%6Fom"} {
		f := newFixture()
		f.policy.Redirects = []*catalogv1.Redirect{{FromMethod: "BOOK", FromPath: from, ToMethod: "RESERVE", ToPath: "/room"}}
		tb := f.table(t)
		for _, target := range []string{"/room", "/%72oom", "/%72%6F%6Fm", "/%72oom?x=1"} {
			d := tb.Decide("BOOK", target)
			if d.Outcome != Matched || !d.Redirected || d.Method != "RESERVE" || d.Endpoint == nil || d.Endpoint.Method != "RESERVE" || d.Endpoint.Template.Raw != "/room" {
				t.Errorf("from_path %s, BOOK %s: outcome %d, handled as %s (redirected %v), endpoint %v; want RESERVE /room",
					from, target, d.Outcome, d.Method, d.Redirected, d.Endpoint)
			}
		}
		// The 405 body lists the redirect for the encoded spelling too.
		check(t, tb.Decide("QUERY", "/%72oom"), want{outcome: MethodNotAllowed, reason: ReasonMethodNotAllowed,
			allowed: []string{"BOOK", "RESERVE"}, redirs: map[string]string{"BOOK": "RESERVE"}})
		f.policy.Disallow = []string{"SEARCH"}
		check(t, f.table(t).Decide("SEARCH", "/%72oom"), want{outcome: MethodNotAllowed, reason: ReasonMethodDisallowed,
			allowed: []string{"BOOK", "RESERVE"}, redirs: map[string]string{"BOOK": "RESERVE"}})
	}
	// Two spellings of one from_path are one redirect, declared twice.
	f := newFixture()
	f.policy.Redirects = []*catalogv1.Redirect{
		{FromMethod: "BOOK", FromPath: "/room", ToMethod: "RESERVE"},
		{FromMethod: "BOOK", FromPath: "/r%6Fom", ToMethod: "QUERY"},
	}
	if _, err := New(&catalogv1.Snapshot{Methods: f.methods, Endpoints: f.endpoints, MethodPolicy: f.policy}); err == nil || !strings.Contains(err.Error(), "two redirects") {
		t.Fatalf("err = %v, want two redirects from BOOK /room", err)
	}
}

// TestRedirectToTheSamePathLooksUpThatPath: a redirect that changes only
// the method (from_path equal to to_path) looks the path up with its own
// segments, once each, and binds nothing a template would not bind for a
// request sent there directly.
func TestRedirectToTheSamePathLooksUpThatPath(t *testing.T) {
	f := newFixture()
	f.policy.Redirects = []*catalogv1.Redirect{{FromMethod: "BOOK", FromPath: "/lobby", ToMethod: "RESERVE", ToPath: "/lobby"}}
	f.endpoints = append(f.endpoints, ep("RESERVE", "/{a}/{b}"))
	tb := f.table(t)
	check(t, tb.Decide("RESERVE", "/lobby"), want{outcome: NotFound})
	check(t, tb.Decide("BOOK", "/lobby"), want{outcome: NotFound})

	f.endpoints = append(f.endpoints, ep("RESERVE", "/{a}"))
	tb = f.table(t)
	d := tb.Decide("BOOK", "/lobby")
	check(t, d, want{outcome: Matched, method: "RESERVE", path: "/{a}", params: map[string]string{"a": "lobby"}})
	if len(d.Params()) != 1 {
		t.Fatalf("params = %v, want only a=lobby", d.Params())
	}
}

// TestTooDeepEncodedPathMatchesNothing: a request path deeper than
// MaxSegments keeps only its first MaxSegments decoded segments, so those
// must not stand for the path: with one of them percent-encoded, it is
// still 404, not 405 for the endpoint those first segments spell.
func TestTooDeepEncodedPathMatchesNothing(t *testing.T) {
	f := newFixture()
	f.endpoints = append(f.endpoints, ep("QUERY", strings.Repeat("/a", MaxSegments)))
	tb := f.table(t)
	check(t, tb.Decide("QUERY", strings.Repeat("/a", MaxSegments)), want{outcome: Matched})
	check(t, tb.Decide("FETCH", "/%61"+strings.Repeat("/a", MaxSegments)), want{outcome: NotFound, reason: ReasonNotFound})
}

// TestFloorNeverGets459 is api assertion 6 (AGTP-API §3.1, §4.4).
func TestFloorNeverGets459(t *testing.T) {
	for _, pol := range []*catalogv1.MethodPolicy{
		{Allow: []string{"*"}},
		{Allow: []string{"BOOK"}, Disallow: agtp.FloorMethods()},
	} {
		f := newFixture()
		f.methods = nil // even a snapshot that forgets them admits the floor
		f.endpoints = nil
		f.policy = pol
		tb := f.table(t)
		for _, m := range agtp.FloorMethods() {
			for _, p := range []string{"/", "/anything", "/x/y"} {
				if d := tb.Decide(m, p); d.Outcome == MethodViolation {
					t.Errorf("%s %s got 459", m, p)
				}
			}
		}
	}
}

// TestAliasSameAsCanonical is api assertion 11 (AGTP-API §9.2): GET /catalog
// decides exactly like FETCH /catalog apart from the requested method.
func TestAliasSameAsCanonical(t *testing.T) {
	tb := newFixture().table(t)
	g, f := tb.Decide("GET", "/catalog"), tb.Decide("FETCH", "/catalog")
	if g.Endpoint != f.Endpoint || g.Outcome != f.Outcome || g.Method != f.Method {
		t.Fatalf("GET %+v != FETCH %+v", g, f)
	}
	if g.RequestedMethod != "GET" || !g.Aliased {
		t.Fatalf("requested method not kept: %+v", g)
	}
}

// TestRemovedVerbGets459 is api assertion 10 (AGTP-API §4.5): a catalog
// MAJOR release without AUDIT makes AUDIT a 459.
func TestRemovedVerbGets459(t *testing.T) {
	f := newFixture()
	f.methods = slices.DeleteFunc(f.methods, func(m *catalogv1.Method) bool { return m.Name == "AUDIT" })
	f.endpoints = slices.DeleteFunc(f.endpoints, func(e *catalogv1.Endpoint) bool { return e.Method == "AUDIT" })
	d := f.table(t).Decide("AUDIT", "/ledger")
	check(t, d, want{outcome: MethodViolation, reason: ReasonMethodNotInCatalog})
	if d.CatalogVersion != "1.0.0" {
		t.Fatalf("459 must cite the catalog version, got %q", d.CatalogVersion)
	}
}

// TestCompanionAdmission pins companions assertions 1-9.
func TestCompanionAdmission(t *testing.T) {
	f := newFixture()
	f.endpoints = append(f.endpoints, ep("FETCH", "/orders/{id}"), ep("FETCH", "/orders/latest"))
	tb := f.table(t)
	for _, m := range []string{"SEARCH2", "BOOK_TABLE", "book-reservation", "FindRestaurant"} {
		t.Run("1 "+m+" gets 459", func(t *testing.T) {
			check(t, tb.Decide(m, "/items"), want{outcome: MethodViolation, reason: ReasonMethodInvalid})
		})
	}
	t.Run("3 BOOKING on an unknown path gets 459", func(t *testing.T) {
		check(t, tb.Decide("BOOKING", "/nowhere"), want{outcome: MethodViolation})
	})
	// CONNECT and TRACE are verbs of the pinned catalog 1.0.0, which
	// docs/decisions.md#D-pinned-catalog makes authoritative:
	// TestPinnedCatalogAdmitsConnectAndTrace.
	for _, m := range []string{"HEAD", "OPTIONS"} {
		t.Run("4 "+m+" always gets 459", func(t *testing.T) {
			check(t, tb.Decide(m, "/catalog"), want{outcome: MethodViolation})
		})
	}
	t.Run("5 QUERY /cancel names the segment", func(t *testing.T) {
		check(t, tb.Decide("QUERY", "/cancel"), want{outcome: EndpointViolation, segment: "cancel"})
	})
	t.Run("5 FETCH /orders/Book is exempt as a parameter", func(t *testing.T) {
		check(t, tb.Decide("FETCH", "/orders/Book"), want{outcome: Matched, path: "/orders/{id}"})
	})
	t.Run("5 FIND /orders/Book: a literal leak on an unregistered path", func(t *testing.T) {
		check(t, tb.Decide("QUERY", "/orders/x/Book"), want{outcome: EndpointViolation, segment: "Book"})
	})
	t.Run("9 literal /orders/latest beats /orders/{id}", func(t *testing.T) {
		check(t, tb.Decide("FETCH", "/orders/latest"), want{outcome: Matched, path: "/orders/latest"})
	})
}

// TestPinnedCatalogAdmitsConnectAndTrace pins the decision on companions
// assertion 4 (docs/catalogsvc.md): the assertion expects 459 for CONNECT
// and TRACE because it takes them for non-catalog verbs, but the catalog
// 1.0.0 that docs/decisions.md#D-pinned-catalog pins lists both, so they are
// admitted like any catalog verb (405 on a path that exposes other methods,
// 404 on an unknown one). HEAD and OPTIONS are not in it: 459.
func TestPinnedCatalogAdmitsConnectAndTrace(t *testing.T) {
	cat, err := catalog.Load(catalogdata.Default)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := New(&catalogv1.Snapshot{CatalogVersion: catalogdata.DefaultVersion, Methods: cat.Proto(nil), Endpoints: []*catalogv1.Endpoint{ep("QUERY", "/orders"), ep("FETCH", "/orders")},
		MethodPolicy: &catalogv1.MethodPolicy{Allow: []string{"*"}, Aliases: defaultAliases()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		want         want
	}{
		{"CONNECT", "/orders", want{outcome: MethodNotAllowed}},
		{"TRACE", "/orders", want{outcome: MethodNotAllowed}},
		{"CONNECT", "/nowhere", want{outcome: NotFound}},
		{"TRACE", "/nowhere", want{outcome: NotFound}},
		{"HEAD", "/orders", want{outcome: MethodViolation, reason: ReasonMethodNotInCatalog}},
		{"OPTIONS", "/orders", want{outcome: MethodViolation, reason: ReasonMethodNotInCatalog}},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) { check(t, tb.Decide(tc.method, tc.path), tc.want) })
	}
}

// TestTemplateRegistration pins the registration-time rules of
// AGTP-API §5 (§5.1, §5.2).
func TestTemplateRegistration(t *testing.T) {
	verbs := VerbSet{"BOOK": {}, "RESERVE": {}, "QUERY": {}}
	tests := []struct {
		path string
		rule string
	}{
		{"/", ""},
		{"/room", ""},
		{"/customers/{customer_id}", ""},
		{"/orders/{order_id}/line-items/{line_item_id}", ""},
		{"/Rooms_Available", ""},
		{"/booking", ""},
		{"/book/reserve", RuleMethodInPath},
		{"/room/Reserve", RuleMethodInPath},
		{"/RE_SERVE", RuleMethodInPath},
		{"/room/", RuleTrailingSlash},
		{"room", RulePathNotAbsolute},
		{"/{id}x", RuleMixedSegment},
		{"/prefix-{id}", RuleMixedSegment},
		{"/a/{id}/{id}", RuleDuplicateParam},
		{"/a/{?q}", RuleTemplateOperator},
		{"/a/{+x}", RuleTemplateOperator},
		{"/a/{#f}", RuleTemplateOperator},
		{"/a/{x,y}", RuleTemplateOperator},
		{"/a/{}", RuleParamName},
		{"/a?x=1", RuleQueryInTemplate},
		{"/a//b", RuleEmptySegment},
		{"/a/../b", RuleDotSegment},
		{"/a b", RulePathMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			_, err := ParseTemplate(tc.path, verbs)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ge, ok := err.(*GrammarError)
			if !ok || ge.Rule != tc.rule {
				t.Fatalf("err = %v, want rule %s", err, tc.rule)
			}
		})
	}
}

func TestReservedDiscoverConflict(t *testing.T) {
	for p, want := range map[string]string{
		"/methods": "/methods", "/methods/v2": "/methods", "/agents-extended": "/agents",
		"/toolset": "/tools", "/patterns-v2": "/patterns", "/contracts/history": "/contracts",
		"/Genesis": "/genesis", "/catalog": "", "/": "", "/my-methods": "",
		// The literal is registered percent-decoded, so an encoded
		// spelling names the same path.
		"/%6Dethods": "/methods", "/%61gents-extended/x": "/agents", "/%54OOLS": "/tools", "/%63atalog": "",
	} {
		if got := ReservedDiscoverConflict(p); got != want {
			t.Errorf("%s: got %q, want %q", p, got, want)
		}
	}
}

// TestNewRefuses pins the load-time refusals: ambiguity, duplicates,
// unadmitted methods, alias chains.
func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*fixture)
		want  string
	}{
		{"two templates with the same parameter count overlap", func(f *fixture) {
			f.endpoints = append(f.endpoints, ep("QUERY", "/a/{x}"), ep("BOOK", "/{y}/b"))
		}, "ambiguity"},
		{"same method and shape with other param names", func(f *fixture) {
			f.endpoints = append(f.endpoints, ep("QUERY", "/o/{x}"), ep("QUERY", "/o/{y}"))
		}, "same route"},
		{"endpoint on a method that is not admitted", func(f *fixture) {
			f.endpoints = append(f.endpoints, ep("FROBNICATE", "/x"))
		}, "not admitted"},
		{"endpoint on a legacy verb", func(f *fixture) {
			f.policy.Legacy = []string{"GET"}
			f.policy.Aliases = nil
			f.endpoints = append(f.endpoints, ep("GET", "/x"))
		}, "not admitted"},
		{"alias chain", func(f *fixture) {
			f.policy.Aliases = map[string]string{"GET": "FETCH", "FETCH": "QUERY"}
		}, "chains"},
		{"leaking literal", func(f *fixture) {
			f.endpoints = append(f.endpoints, ep("QUERY", "/orders/book"))
		}, "method-name-in-path"},
		{"legacy verb outside the five", func(f *fixture) {
			f.policy.Legacy = []string{"HEAD"}
		}, "legacy verb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.setup(f)
			_, err := New(&catalogv1.Snapshot{Methods: f.methods, Endpoints: f.endpoints, MethodPolicy: f.policy})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Same shape under different methods is fine: the methods differ.
	f := newFixture()
	f.endpoints = append(f.endpoints, ep("QUERY", "/o/{x}"), ep("CANCEL", "/o/{y}"))
	tb := f.table(t)
	d := tb.Decide("CANCEL", "/o/42")
	if v, _ := d.Param("y"); d.Outcome != Matched || v != "42" {
		t.Fatalf("CANCEL /o/42: %+v", d)
	}
}

// TestFewestParamsWins checks that the least-parameter template is chosen
// among several matching ones, whatever the trie order.
func TestFewestParamsWins(t *testing.T) {
	f := newFixture()
	f.endpoints = append(f.endpoints, ep("QUERY", "/a/{x}/{y}"), ep("QUERY", "/{p}/b/c"), ep("QUERY", "/{p}/{q}/{r}"))
	tb := f.table(t)
	check(t, tb.Decide("QUERY", "/a/b/c"), want{outcome: Matched, path: "/{p}/b/c"})
	check(t, tb.Decide("QUERY", "/a/z/c"), want{outcome: Matched, path: "/a/{x}/{y}"})
	check(t, tb.Decide("QUERY", "/z/z/z"), want{outcome: Matched, path: "/{p}/{q}/{r}"})
}

func TestDecideAllocations(t *testing.T) {
	tb := newFixture().table(t)
	var d Decision
	for _, tc := range [][2]string{{"QUERY", "/customers/c-17"}, {"QUERY", "/catalog"}, {"GET", "/catalog?x=1"}} {
		allocs := testing.AllocsPerRun(100, func() { tb.DecideInto(&d, tc[0], tc[1]) })
		if allocs != 0 {
			t.Errorf("%s %s: %v allocations on the hit path", tc[0], tc[1], allocs)
		}
	}
}

// bigTable is a registry of n endpoints across verbs and shapes.
func bigTable(b testing.TB, n int) (*Table, []string) {
	f := newFixture()
	verbs := []string{"QUERY", "FETCH", "CREATE", "REPLACE", "REMOVE", "MODIFY", "SEARCH", "SUMMARIZE", "EXECUTE", "RESERVE"}
	var paths []string
	for i := 0; len(f.endpoints) < n; i++ {
		var p string
		switch i % 4 {
		case 0:
			p = fmt.Sprintf("/res%d", i)
		case 1:
			p = fmt.Sprintf("/res%d/{id}", i)
		case 2:
			p = fmt.Sprintf("/res%d/{id}/items/{item_id}", i)
		default:
			p = fmt.Sprintf("/tenants/t%d/res/{id}", i)
		}
		for _, v := range verbs[:3] {
			f.endpoints = append(f.endpoints, ep(v, p))
		}
		req := strings.ReplaceAll(strings.ReplaceAll(p, "{id}", "abc-123"), "{item_id}", "7")
		paths = append(paths, req)
	}
	return f.table(b), paths
}

func TestBigTable(t *testing.T) {
	tb, paths := bigTable(t, 500)
	if len(tb.Endpoints()) < 500 {
		t.Fatalf("only %d endpoints", len(tb.Endpoints()))
	}
	for _, p := range paths {
		if d := tb.Decide("FETCH", p); d.Outcome != Matched {
			t.Fatalf("FETCH %s: %+v", p, d)
		}
	}
}

// BenchmarkDecide measures the in-process decision over a 500-endpoint
// registry (the target is at most 1 µs).
func BenchmarkDecide(b *testing.B) {
	tb, paths := bigTable(b, 500)
	var d Decision
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tb.DecideInto(&d, "FETCH", paths[i%len(paths)])
		}
	})
	b.Run("hit-alias-query", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			tb.DecideInto(&d, "GET", paths[i%len(paths)]+"?q=1")
		}
	})
	b.Run("404", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tb.DecideInto(&d, "FETCH", "/nothing/here/at-all")
		}
	})
	b.Run("405", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tb.DecideInto(&d, "SUMMARIZE", "/res1/abc")
		}
	})
	b.Run("460", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tb.DecideInto(&d, "QUERY", "/orders/book")
		}
	})
}

// TestServed: a method's endpoints are served unless the method policy
// answers it 405; the floor always is, and what is not admitted is not.
func TestServed(t *testing.T) {
	f := newFixture()
	f.policy.Allow = []string{"BOOK", "SEARCH"}
	f.policy.Disallow = []string{"SEARCH", "QUERY"}
	tb := f.table(t)
	for _, tc := range []struct {
		method string
		served bool
	}{
		{"BOOK", true},     // allowed
		{"RESERVE", false}, // outside the allow list
		{"SEARCH", false},  // allowed, then disallowed
		{"QUERY", true},    // the floor cannot be refused
		{"NOPE", false},    // not admitted
		{"FETCH", false},   // outside the allow list
		{"DISCOVER", true}, // floor
	} {
		if got := tb.Served(tc.method); got != tc.served {
			t.Errorf("Served(%s) = %v, want %v", tc.method, got, tc.served)
		}
	}
}
