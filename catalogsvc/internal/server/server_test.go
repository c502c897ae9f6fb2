package server

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/internal/registry"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func testOptions() Options {
	o := DefaultOptions()
	o.Manifest.ServerID = "agents.example.test"
	o.Manifest.Operator = "Example"
	o.Manifest.Contact = "ops@example.test"
	o.ReloadInterval = 100 * time.Millisecond
	o.ResyncInterval = 0
	return o
}

// serve starts s on a loopback gRPC server and returns a client.
func serve(t *testing.T, s *Server) catalogv1.CatalogServiceClient {
	t.Helper()
	conn := testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { catalogv1.RegisterCatalogServiceServer(g, s) })
	return catalogv1.NewCatalogServiceClient(conn)
}

func run(t *testing.T, s *Server) {
	t.Helper()
	testkit.Run(t, "Run", s.Run)
}

func newServer(t *testing.T, rdb redis.UniversalClient, o Options) *Server {
	t.Helper()
	s, err := New(testkit.Context(t), rdb, nil, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func wantReason(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	c, r, _, _ := grpcerr.Reason(err)
	if c != code || r != reason {
		t.Fatalf("err = %v (code %v reason %q), want %v %q", err, c, r, code, reason)
	}
}

// TestResolveRouteOverGRPC drives the decision through a real gRPC
// server: matched with parameters, 459 citing the catalog version, 460
// naming the segment, 405 with its body fields, 404, and warnings.
func TestResolveRouteOverGRPC(t *testing.T) {
	o := testOptions()
	o.DemoEndpoints = true
	c := serve(t, newServer(t, nil, o))
	ctx := testkit.Context(t)
	resolve := func(m, p string) *catalogv1.ResolveRouteResponse {
		t.Helper()
		r, err := c.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: m, Path: p})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := resolve("QUERY", "/orders/o-17?x=1")
	if r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_MATCHED || r.GetPathParams()["order_id"] != "o-17" || r.GetEndpoint().GetHandlerName() != "demo.orders.get" {
		t.Fatalf("match: %v", r)
	}
	if r = resolve("FROBNICATE", "/orders"); r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_METHOD_VIOLATION || r.GetCatalogVersion() != "1.0.0" || r.GetEffectiveMethod() != "FROBNICATE" {
		t.Fatalf("459: %v", r)
	}
	if r = resolve("QUERY", "/orders/o-1/cancel"); r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_ENDPOINT_VIOLATION || r.GetSegment() != "cancel" {
		t.Fatalf("460: %v", r)
	}
	r = resolve("SUMMARIZE", "/orders")
	if r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_METHOD_NOT_ALLOWED || strings.Join(r.GetAllowedMethodsForPath(), ",") != "CREATE,QUERY" {
		t.Fatalf("405: %v", r)
	}
	if r = resolve("QUERY", "/nowhere"); r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_NOT_FOUND {
		t.Fatalf("404: %v", r)
	}
	if r = resolve("GET", "/orders"); r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_METHOD_NOT_ALLOWED || r.GetRequestedMethod() != "GET" || r.GetEffectiveMethod() != "FETCH" {
		t.Fatalf("alias: %v", r)
	}
	if r = resolve("FETCH", "/order-history/o-1"); !strings.HasPrefix(r.GetEndpointWarning(), "deprecated; successor=QUERY /orders/{order_id}") {
		t.Fatalf("endpoint warning: %v", r)
	}
	if r = resolve("DISCOVER", "/"); r.GetEndpoint().GetTier() != catalogv1.EndpointTier_ENDPOINT_TIER_A || !r.GetEndpoint().GetAnonymous() {
		t.Fatalf("DISCOVER /: %v", r)
	}

	m, err := c.GetManifest(ctx, &catalogv1.GetManifestRequest{})
	if err != nil || m.GetContentType() != "application/vnd.agtp.manifest+json" || m.GetEtag() != manifest.ETag([]byte(m.GetManifest())) || m.GetDocumentVersion() == "" {
		t.Fatalf("manifest: %v %v", m, err)
	}
	lm, err := c.ListMethods(ctx, &catalogv1.ListMethodsRequest{Category: "notification"})
	if err != nil || len(lm.GetMethods()) == 0 {
		t.Fatalf("ListMethods: %v %v", lm, err)
	}
	for _, mm := range lm.GetMethods() {
		if !contains(mm.GetCategories(), "notification") {
			t.Fatalf("%s is not notification", mm.GetName())
		}
	}
	listMethods := func(cat string) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := c.ListMethods(ctx, &catalogv1.ListMethodsRequest{Category: cat, PageSize: size, PageToken: tok})
			var names []string
			for _, m := range r.GetMethods() {
				names = append(names, m.GetName())
			}
			return names, r.GetNextPageToken(), err
		}
	}
	all, _, err := listMethods("")(1000, "")
	if err != nil || !slices.IsSorted(all) || len(all) < 4 {
		t.Fatalf("one page of every verb: %v %v", all, err)
	}
	for _, size := range []int32{1, 3} {
		tok := testkit.CheckPaging(t, size, all, listMethods(""))
		testkit.CheckTokenMismatch(t, tok, listMethods("notification"))
	}
	_, err = c.ListMethods(ctx, &catalogv1.ListMethodsRequest{Category: "compute"})
	wantReason(t, err, codes.InvalidArgument, ReasonCategoryUnknown)
	_, err = c.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: &structpb.Struct{}})
	wantReason(t, err, codes.Unavailable, ReasonAdminUnavailable)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func copyDemo(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := fs.ReadFile(demo.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReloadKeepsServingOnBrokenFile: a broken file is refused with an
// error naming file, line, field and rule, the old configuration keeps
// serving, and the fixed file is picked up without a restart; a watcher
// sees the new snapshot.
func TestReloadKeepsServingOnBrokenFile(t *testing.T) {
	dir := t.TempDir()
	copyDemo(t, dir, "orders-get.yaml")
	o := testOptions()
	o.EndpointsDir = dir
	s := newServer(t, nil, o)
	c := serve(t, s)
	run(t, s)
	ctx := testkit.Context(t)

	stream, err := c.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	rev0 := first.GetSnapshot().GetRevision()

	good, _ := fs.ReadFile(demo.FS, "documents-summarize.yaml")
	broken := strings.Replace(string(good), "impact: informational", "impact: maybe", 1)
	if err := os.WriteFile(filepath.Join(dir, "summarize.yaml"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the broken file to be refused", func() bool { return s.LoadError() != nil })
	msg := s.LoadError().Error()
	if !strings.Contains(msg, "summarize.yaml:12: semantic.impact:") || !strings.Contains(msg, "impact-enum") {
		t.Fatalf("error does not name file, line, field and rule: %s", msg)
	}
	r, err := c.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: "QUERY", Path: "/orders/o-1"})
	if err != nil || r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_MATCHED {
		t.Fatalf("old configuration stopped serving: %v %v", r, err)
	}
	if s.State().Snapshot.GetRevision() != rev0 {
		t.Fatal("a broken file changed the revision")
	}

	if err := os.WriteFile(filepath.Join(dir, "summarize.yaml"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if next.GetSnapshot().GetRevision() <= rev0 || s.LoadError() != nil {
		t.Fatalf("revision %d after %d, load error %v", next.GetSnapshot().GetRevision(), rev0, s.LoadError())
	}
	r, _ = c.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: "SUMMARIZE", Path: "/documents"})
	if r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_MATCHED {
		t.Fatalf("fixed file not served: %v", r)
	}
	// Removing a file removes its endpoint.
	if err := os.Remove(filepath.Join(dir, "summarize.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	r, _ = c.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: "SUMMARIZE", Path: "/documents"})
	if r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_NOT_FOUND {
		t.Fatalf("removed file still served: %v", r)
	}
}

func TestNewRefusesBrokenStartConfiguration(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("method: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.EndpointsDir = dir
	if _, err := New(testkit.Context(t), nil, nil, o); err == nil || !strings.Contains(err.Error(), "x.yaml") {
		t.Fatalf("err = %v", err)
	}
	o = testOptions()
	o.Manifest.ServerID = ""
	if _, err := New(testkit.Context(t), nil, nil, o); err == nil {
		t.Fatal("missing server_id accepted")
	}
}

func summarizeJSON(t *testing.T, mutate func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"method": "SUMMARIZE", "path": "/notes/{note_id}", "description": "Summarizes one note.",
		"semantic": map[string]any{"intent": "Summarize the note.", "actor": "agent", "outcome": "The caller holds a summary.",
			"capability": "analysis", "confidence": 0.8, "impact": "informational", "is_idempotent": true},
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"note_id": map[string]any{"type": "string"}},
			"required": []any{"note_id"}, "additionalProperties": false},
		"output_schema": map[string]any{"type": "object", "additionalProperties": true},
		"errors":        []any{"note_not_found"},
		"handler":       map[string]any{"type": "registered_function", "function": "demo.notes.summarize"},
	}
	if mutate != nil {
		mutate(m)
	}
	b, _ := json.Marshal(m)
	return b
}

// TestAdminRPCsWithRedis: two replicas on one Redis. Runtime endpoints
// persist, replicas converge through pub/sub with the same version, the
// version strictly increases and survives a restart (companions
// assertion 18, core §7.6.7), and deletes hide file endpoints.
func TestAdminRPCsWithRedis(t *testing.T) {
	rs := testkit.StartRedis(t)
	_, priv, _ := ed25519.GenerateKey(nil)
	o := testOptions()
	o.DemoEndpoints = true
	o.SigningKey, o.SigningKeyID = priv, "suite-1"
	a := newServer(t, rs.Client(t), o)
	b := newServer(t, rs.Client(t), o)
	run(t, a)
	run(t, b)
	ca, cb := serve(t, a), serve(t, b)
	ctx := testkit.Context(t)
	if a.State().Snapshot.GetApiVersion() != b.State().Snapshot.GetApiVersion() {
		t.Fatalf("replicas disagree at start: %s vs %s", a.State().Snapshot.GetApiVersion(), b.State().Snapshot.GetApiVersion())
	}
	v0 := a.State().Snapshot.GetRevision()

	put, err := ca.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: definitionStruct(t, summarizeJSON(t, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if put.GetRevision() <= v0 || put.GetEndpoint().GetPath() != "/notes/{note_id}" || put.GetApiVersion() == "" {
		t.Fatalf("put: %v", put)
	}
	testkit.WaitFor(t, 5*time.Second, "replica b to converge", func() bool {
		return b.State().Snapshot.GetRevision() == put.GetRevision()
	})
	if a.State().ETag != b.State().ETag {
		t.Fatal("replicas publish different manifests for one configuration")
	}
	r, err := cb.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: "SUMMARIZE", Path: "/notes/n-1"})
	if err != nil || r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_MATCHED {
		t.Fatalf("replica b does not route the new endpoint: %v %v", r, err)
	}

	// Deprecating through the admin API is a PUT with a deprecated block.
	dep, err := ca.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: definitionStruct(t, summarizeJSON(t, func(m map[string]any) {
		m["deprecated"] = map[string]any{"deprecated_in": "1.0", "successor": map[string]any{"path": "/documents"}}
	}))})
	if err != nil || dep.GetRevision() <= put.GetRevision() || dep.GetEndpoint().GetDeprecationMessage() != "deprecated; successor=/documents" {
		t.Fatalf("deprecate: %v %v", dep, err)
	}

	// Invalid and conflicting definitions are refused, naming the rule.
	_, err = ca.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: definitionStruct(t, summarizeJSON(t, func(m map[string]any) { m["path"] = "/notes/summarize" }))})
	wantReason(t, err, codes.InvalidArgument, ReasonEndpointInvalid)
	_, err = ca.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: definitionStruct(t, summarizeJSON(t, func(m map[string]any) {
		m["path"] = "/{kind}/latest"
		m["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"kind": map[string]any{"type": "string"}}, "additionalProperties": false}
	}))})
	if err == nil {
		// /{kind}/latest vs /notes/{note_id}: same count, compatible.
		t.Fatal("ambiguous template accepted")
	}
	wantReason(t, err, codes.FailedPrecondition, ReasonEndpointConflict)
	_, err = ca.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: definitionStruct(t, summarizeJSON(t, nil)), Tier: catalogv1.EndpointTier_ENDPOINT_TIER_A})
	wantReason(t, err, codes.InvalidArgument, ReasonTierReserved)

	// Delete a runtime endpoint and a file endpoint.
	del, err := ca.DeleteEndpoint(ctx, &catalogv1.DeleteEndpointRequest{Method: "SUMMARIZE", Path: "/notes/{note_id}"})
	if err != nil || del.GetRevision() <= dep.GetRevision() {
		t.Fatalf("delete: %v %v", del, err)
	}
	if _, err := ca.DeleteEndpoint(ctx, &catalogv1.DeleteEndpointRequest{Method: "CANCEL", Path: "/orders/{order_id}"}); err != nil {
		t.Fatal(err)
	}
	r, _ = ca.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: "CANCEL", Path: "/orders/o-1"})
	if r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_METHOD_NOT_ALLOWED {
		t.Fatalf("deleted file endpoint still routes: %v", r)
	}
	_, err = ca.DeleteEndpoint(ctx, &catalogv1.DeleteEndpointRequest{Method: "CANCEL", Path: "/orders/{order_id}"})
	wantReason(t, err, codes.NotFound, ReasonEndpointNotFound)
	_, err = ca.DeleteEndpoint(ctx, &catalogv1.DeleteEndpointRequest{Method: "DISCOVER", Path: "/methods"})
	wantReason(t, err, codes.FailedPrecondition, ReasonBuiltinEndpoint)

	// A restarted replica reads the same state and the same version; the
	// version never went down.
	last := a.State().Snapshot.GetRevision()
	testkit.WaitFor(t, 5*time.Second, "replica b to converge", func() bool { return b.State().Snapshot.GetRevision() == last })
	c := newServer(t, rs.Client(t), o)
	if c.State().Snapshot.GetRevision() != last || c.State().ETag != a.State().ETag {
		t.Fatalf("restart: revision %d etag %s, want %d %s", c.State().Snapshot.GetRevision(), c.State().ETag, last, a.State().ETag)
	}
	// Signed manifest verifies.
	if _, err := manifest.Verify(c.State().Manifest, priv.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteAtEndpointLimitKeepsCatalogLoadable: with the runtime hash
// at store.MaxEndpoints, hiding a file endpoint would add a tombstone;
// it is refused (422 endpoint-conflict) and stores nothing, so the hash
// stays loadable. A hash already over the limit (an older version or a
// race left it) does not stop a replica from starting: the first
// MaxEndpoints keys are served and the count is logged as an error.
func TestDeleteAtEndpointLimitKeepsCatalogLoadable(t *testing.T) {
	rs := testkit.StartRedis(t)
	rdb := rs.Client(t)
	ctx := testkit.Context(t)
	const limit = 50
	runtimeEntry := func(path string) (string, string) {
		def := summarizeJSON(t, func(m map[string]any) { m["path"] = path })
		b, _ := json.Marshal(registry.Runtime{Key: "SUMMARIZE " + path, Tier: catalogv1.EndpointTier_ENDPOINT_TIER_B, Definition: def})
		return "SUMMARIZE " + path, string(b)
	}
	vals := make([]any, 0, 2*limit)
	for i := range limit {
		k, v := runtimeEntry(fmt.Sprintf("/notes-%05d/{note_id}", i))
		vals = append(vals, k, v)
	}
	if err := rdb.HSet(ctx, rediskeys.Endpoints, vals...).Err(); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.DemoEndpoints, o.MaxRuntimeEndpoints = true, limit
	c := serve(t, newServer(t, rdb, o))

	_, err := c.DeleteEndpoint(ctx, &catalogv1.DeleteEndpointRequest{Method: "CANCEL", Path: "/orders/{order_id}"})
	wantReason(t, err, codes.FailedPrecondition, ReasonEndpointConflict)
	if n, _ := rdb.HLen(ctx, rediskeys.Endpoints).Result(); n != limit {
		t.Fatalf("runtime entries %d after a refused delete, want %d", n, limit)
	}
	if r, _ := c.ResolveRoute(ctx, &catalogv1.ResolveRouteRequest{Method: "CANCEL", Path: "/orders/o-1"}); r.GetOutcome() != catalogv1.RouteOutcome_ROUTE_OUTCOME_MATCHED {
		t.Fatalf("refused delete hid the file endpoint: %v", r)
	}

	// One entry past the limit, written around the store: a new replica
	// still starts, serves the keys that fit and names the count.
	k, v := runtimeEntry("/zz/{note_id}")
	if err := rdb.HSet(ctx, rediskeys.Endpoints, k, v).Err(); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	s, err := New(ctx, rdb, slog.New(slog.NewJSONHandler(&logged, nil)), o)
	if err != nil {
		t.Fatalf("catalog cannot start with %d runtime entries: %v", limit+1, err)
	}
	if d := s.State().Table.Decide("SUMMARIZE", "/zz/n-1"); d.Outcome == route.Matched {
		t.Fatal("the entry past the limit (last by key) is served")
	}
	if d := s.State().Table.Decide("SUMMARIZE", "/notes-00000/n-1"); d.Outcome != route.Matched {
		t.Fatalf("an entry within the limit is not served: %v", d.Outcome)
	}
	if want := fmt.Sprintf(`"level":"ERROR","msg":"runtime endpoints over the limit; only the first by key are loaded","stored":%d`, limit+1); !strings.Contains(logged.String(), want) {
		t.Fatalf("start-up log lacks %s:\n%s", want, logged.String())
	}
}

// TestSlowWatcherDoesNotBlockOthers: a watcher that never reads does not
// hold up the others, which receive the newest snapshot.
func TestSlowWatcherDoesNotBlockOthers(t *testing.T) {
	rs := testkit.StartRedis(t)
	o := testOptions()
	o.DemoEndpoints = true
	s := newServer(t, rs.Client(t), o)
	run(t, s)
	c := serve(t, s)
	ctx := testkit.Context(t)
	slow, err := c.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_ = slow // never read
	fast, err := c.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fast.Recv(); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := range 8 {
		p, err := c.PutEndpoint(ctx, &catalogv1.PutEndpointRequest{Definition: definitionStruct(t, summarizeJSON(t, func(m map[string]any) {
			m["description"] = strings.Repeat("Summarizes one note. ", i+1)
		}))})
		if err != nil {
			t.Fatal(err)
		}
		last = p.GetRevision()
	}
	deadline := time.After(5 * time.Second)
	for {
		got := make(chan *catalogv1.WatchSnapshotResponse, 1)
		go func() {
			m, err := fast.Recv()
			if err == nil {
				got <- m
			}
		}()
		select {
		case m := <-got:
			if m.GetSnapshot().GetRevision() == last {
				return
			}
		case <-deadline:
			t.Fatalf("fast watcher never saw revision %d", last)
		}
	}
}

// TestWatchKnownRevisionSkipsCurrent: a reconnecting watcher that has the
// current revision is not sent it again.
func TestWatchKnownRevisionSkipsCurrent(t *testing.T) {
	o := testOptions()
	o.DemoEndpoints = true
	s := newServer(t, nil, o)
	c := serve(t, s)
	ctx, cancel := context.WithTimeout(testkit.Context(t), 300*time.Millisecond)
	defer cancel()
	stream, err := c.WatchSnapshot(ctx, &catalogv1.WatchSnapshotRequest{KnownRevision: s.State().Snapshot.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err == nil {
		t.Fatalf("got revision %d again", m.GetSnapshot().GetRevision())
	}
}

// definitionStruct is an endpoint definition as PutEndpointRequest.definition.
func definitionStruct(t testing.TB, b []byte) *structpb.Struct {
	t.Helper()
	s, err := jsondoc.Struct(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
