// Package catalogstate keeps the front door's local copy of the catalog
// snapshot, fed by catalogsvc's WatchSnapshot, so that every structural
// decision (459, 460, 404, 405, match) is made in-process with no network
// hop per request.
package catalogstate

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/catalogsvc/watch"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// State is one snapshot, ready to serve from.
type State struct {
	Snapshot *catalogv1.Snapshot
	Table    *route.Table
	// Endpoints are the compiled endpoints (schemas ready), aligned with
	// the snapshot's endpoints by route.Endpoint.Index.
	Endpoints []*endpoint.Endpoint
	// SupportedMethods is the Supported-Methods header value
	// (docs/decisions.md#D-supported-methods): the 18 floor methods (core
	// assertion 32; they are always admitted and always dispatched) and
	// every other method with an endpoint on this server, sorted.
	SupportedMethods string
	// Manifest is the signed manifest's bytes (Snapshot.manifest, or the
	// first release's manifest_json), taken once per snapshot so that
	// DISCOVER / serves it with no conversion per request.
	Manifest []byte

	// documents holds the encoded documents built from this snapshot
	// (Document); methodsFor memoizes MethodsFor by scope set. Both go
	// with the state when the next snapshot replaces it, so a new catalog
	// revision is never answered from an older one's bytes.
	documents  sync.Map // DocumentKey -> *document
	methodsFor sync.Map // string -> []string
	nMethods   atomic.Int64
}

// DocumentKey names a document built from a catalog snapshot alone.
type DocumentKey string

type document struct {
	once sync.Once
	body []byte
	err  error
}

// Document returns the document key, built by build the first time it is
// asked for in this state and then served as the same bytes until the
// next snapshot. Callers must not modify the bytes. Keys are a fixed set of
// constants, so the map stays small.
func (st *State) Document(key DocumentKey, build func(*catalogv1.Snapshot) ([]byte, error)) ([]byte, error) {
	v, _ := st.documents.LoadOrStore(key, &document{})
	d := v.(*document)
	d.once.Do(func() { d.body, d.err = build(st.Snapshot) })
	return d.body, d.err
}

// maxMemoizedScopeSets bounds MethodsFor's memo: distinct scope sets
// beyond it are computed per call.
const maxMemoizedScopeSets = 1024

// Store holds the current State. Readers never block.
type Store struct {
	cur atomic.Pointer[State]
}

// Current returns the current state, or nil before the first snapshot.
func (s *Store) Current() *State { return s.cur.Load() }

// Set builds and installs a state from a snapshot. A snapshot that does
// not build keeps the previous state serving.
func (s *Store) Set(snap *catalogv1.Snapshot) error {
	t, err := route.New(snap)
	if err != nil {
		return fmt.Errorf("catalog snapshot %d: %w", snap.GetRevision(), err)
	}
	compiled := make([]*endpoint.Endpoint, len(snap.GetEndpoints()))
	for i, e := range snap.GetEndpoints() {
		//lint:ignore SA1019 the first release's catalogsvc sends the definition only as bytes
		def, err := jsondoc.PreferStruct(e.GetDefinition(), e.GetDefinitionJson())
		if err == nil {
			compiled[i], err = endpoint.FromJSON(def)
		}
		if err != nil {
			return fmt.Errorf("catalog snapshot %d: endpoint %s %s: %w", snap.GetRevision(), e.GetMethod(), e.GetPath(), err)
		}
	}
	//lint:ignore SA1019 the first release's catalogsvc sends the manifest only as bytes
	manifest := jsondoc.PreferString(snap.GetManifest(), snap.GetManifestJson())
	s.cur.Store(&State{Snapshot: snap, Table: t, Endpoints: compiled, SupportedMethods: supportedMethods(snap), Manifest: manifest})
	return nil
}

// supportedMethods is the floor plus every method with an endpoint.
func supportedMethods(snap *catalogv1.Snapshot) string {
	seen := map[string]bool{}
	var methods []string
	add := func(m string) {
		if !seen[m] {
			seen[m] = true
			methods = append(methods, m)
		}
	}
	for _, m := range agtp.FloorMethods() {
		add(m)
	}
	for _, e := range snap.GetEndpoints() {
		add(e.GetMethod())
	}
	sort.Strings(methods)
	return strings.Join(methods, ", ")
}

// MethodsFor lists the methods beyond the 18-method floor that an agent
// holding scopes can invoke here: the methods of the endpoints it may use
// (MayUse), sorted. It is Supported-Methods narrowed to the agent, what
// its identity document lists with the floor (identitysvc
// GetIdentityDocumentRequest.methods; docs/decisions.md#D-supported-methods).
func (st *State) MethodsFor(scopes agtp.ScopeSet) []string {
	key := scopes.String()
	if v, ok := st.methodsFor.Load(key); ok {
		return slices.Clone(v.([]string))
	}
	out := st.computeMethodsFor(scopes)
	if st.nMethods.Load() < maxMemoizedScopeSets {
		if _, loaded := st.methodsFor.LoadOrStore(key, out); !loaded {
			st.nMethods.Add(1)
		}
	}
	return slices.Clone(out)
}

func (st *State) computeMethodsFor(scopes agtp.ScopeSet) []string {
	var out []string
	for _, ep := range st.Endpoints {
		d := ep.Def
		if agtp.IsFloorMethod(d.Method) || slices.Contains(out, d.Method) {
			continue
		}
		if st.MayUse(ep, true, scopes) {
			out = append(out, d.Method)
		}
	}
	slices.Sort(out)
	return out
}

// MayUse reports whether a caller may invoke ep, by what the catalog
// says of it: its method is served (the method policy does not answer it
// 405), an anonymous caller reaches only anonymous endpoints, and the
// caller's scopes cover every required scope (what policysvc checks,
// docs/decisions.md#D-scope-262). Rate limits, budgets and trust tiers
// are policysvc's to apply when the call is made.
func (st *State) MayUse(ep *endpoint.Endpoint, identified bool, scopes agtp.ScopeSet) bool {
	d := ep.Def
	if st.Table != nil && !st.Table.Served(d.Method) || !identified && !d.Anonymous {
		return false
	}
	required, err := agtp.ParseScopeList(d.RequiredScopes)
	if err != nil {
		return false
	}
	_, ok := scopes.CoversAll(required)
	return ok
}

// Watch follows catalogsvc's WatchSnapshot until ctx is done; ready is
// closed once the first snapshot is installed.
func (s *Store) Watch(ctx context.Context, client catalogv1.CatalogServiceClient, log *slog.Logger, ready chan<- struct{}) error {
	var once sync.Once
	watch.Follow(ctx, client, log, func() uint64 {
		if cur := s.Current(); cur != nil {
			return cur.Snapshot.GetRevision()
		}
		return 0
	}, func(snap *catalogv1.Snapshot) error {
		if err := s.Set(snap); err != nil {
			return err
		}
		once.Do(func() { close(ready) })
		return nil
	})
	return nil
}
