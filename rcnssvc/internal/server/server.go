// Package server is rcnssvc's domain logic: PROPOSE evaluation (core
// §7.2.7, §7.5; AGTP-API §10.4-§10.8), the four-lock RCNS gate for
// unregistered (method, path) pairs (AGTP-API §10.1), and the synthesized
// contracts in Redis with their lifecycle events.
//
// The registered capability surface is the catalog: the server follows
// catalogsvc's WatchSnapshot and synthesises only compositions of the
// endpoints in the current snapshot, bounded by the manifest's
// data_manifest (AGIS §8.3) and policies (synthesis_enabled,
// max_synthesis_depth).
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/catalogsvc/watch"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// Server implements rcnsv1.RcnsServiceServer.
type Server struct {
	rcnsv1.UnimplementedRcnsServiceServer

	rdb     redis.UniversalClient
	log     *slog.Logger
	catalog catalogv1.CatalogServiceClient
	policy  policyv1.PolicyServiceClient
	audit   auditv1.AuditServiceClient
	opts    Options
	now     func() time.Time

	cat      atomic.Pointer[catalogState]
	pats     atomic.Pointer[patternSet]
	patsFile []byte

	// async tracks PROPOSE evaluations that outlive their RPC (261).
	async sync.WaitGroup
}

// New builds the server. A patterns file that does not load fails New.
func New(rdb redis.UniversalClient, log *slog.Logger, catalog catalogv1.CatalogServiceClient, policy policyv1.PolicyServiceClient, audit auditv1.AuditServiceClient, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("rcnssvc options: %w", err)
	}
	if rdb == nil || catalog == nil || audit == nil {
		return nil, errors.New("rcnssvc: redis, catalog and audit are required")
	}
	if policy == nil && (opts.RCNS.RateLimitScope != "" || opts.Propose.RateLimitScope != "") {
		return nil, errors.New("rcnssvc: a policy client is required when rate limit scopes are set")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{rdb: rdb, log: log, catalog: catalog, policy: policy, audit: audit, opts: opts, now: time.Now}
	patterns := opts.Patterns
	if opts.PatternsFile != "" {
		data, err := os.ReadFile(opts.PatternsFile)
		if err != nil {
			return nil, fmt.Errorf("rcnssvc patterns: %w", err)
		}
		if patterns, err = recipe.Load(opts.PatternsFile, data); err != nil {
			return nil, fmt.Errorf("rcnssvc patterns: %w", err)
		}
		s.patsFile = data
	}
	s.SetPatterns(patterns)
	return s, nil
}

// SetPatterns replaces the synthesis patterns. Contracts keep the recipe
// they captured (AGTP-API §10.5); REVOKE target=stale-contracts compares
// them with these.
func (s *Server) SetPatterns(ps []*recipe.Pattern) {
	set := &patternSet{byName: make(map[string]*recipe.Pattern, len(ps))}
	for _, p := range ps {
		if p == nil {
			continue
		}
		set.list = append(set.list, p)
		set.byName[p.RecipeName] = p
	}
	set.byRecipe = slices.Clone(set.list)
	slices.SortStableFunc(set.byRecipe, func(a, b *recipe.Pattern) int { return strings.Compare(a.RecipeName, b.RecipeName) })
	s.pats.Store(set)
}

// Patterns returns the current patterns; read only.
func (s *Server) Patterns() []*recipe.Pattern { return s.pats.Load().list }

type patternSet struct {
	// list is in configuration order, the order the gate tries them.
	list   []*recipe.Pattern
	byName map[string]*recipe.Pattern
	// byRecipe is list ordered by recipe name, the order ListPatterns
	// pages in.
	byRecipe []*recipe.Pattern
}

// Run follows the catalog snapshot, expires contracts, retries pending
// removals of promoted endpoints and reloads the patterns file until ctx
// is done. It waits for asynchronous evaluations before returning.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.watchCatalog(ctx) })
	if s.opts.Contracts.JanitorInterval > 0 {
		wg.Go(func() { s.every(ctx, s.opts.Contracts.JanitorInterval, s.janitor) })
	}
	if s.opts.PatternsFile != "" && s.opts.ReloadInterval > 0 {
		wg.Go(func() { s.every(ctx, s.opts.ReloadInterval, s.reloadPatterns) })
	}
	wg.Wait()
	s.async.Wait()
	return nil
}

func (s *Server) every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

func (s *Server) reloadPatterns(context.Context) {
	data, err := os.ReadFile(s.opts.PatternsFile)
	if err != nil {
		s.log.Warn("patterns file unreadable; previous patterns keep serving", "file", s.opts.PatternsFile, "error", err)
		return
	}
	if bytes.Equal(data, s.patsFile) {
		return
	}
	s.patsFile = data
	ps, err := recipe.Load(s.opts.PatternsFile, data)
	if err != nil {
		s.log.Error("patterns file refused; previous patterns keep serving", "file", s.opts.PatternsFile, "error", err)
		return
	}
	s.SetPatterns(ps)
	s.log.Info("patterns reloaded", "file", s.opts.PatternsFile, "patterns", len(ps))
}

// watchCatalog follows WatchSnapshot until ctx is done.
func (s *Server) watchCatalog(ctx context.Context) {
	watch.Follow(ctx, s.catalog, s.log, func() uint64 {
		if cur := s.cat.Load(); cur != nil {
			return cur.snap.GetRevision()
		}
		return 0
	}, s.setSnapshot)
}

// catalogState is one catalog snapshot, ready for synthesis decisions.
type catalogState struct {
	snap     *catalogv1.Snapshot
	table    *route.Table
	methods  map[string][]string
	policies *catalogv1.ManifestPolicies
	// data is the manifest's data_manifest; nil when the operator
	// declared none (then the patterns alone bound synthesis).
	data map[string]dataClass
}

type dataClass struct {
	Class                 string `json:"class"`
	Sensitivity           string `json:"sensitivity"`
	RequiresAuthorization bool   `json:"requires_authorization"`
}

func (s *Server) setSnapshot(snap *catalogv1.Snapshot) error {
	st, err := newCatalogState(snap)
	if err != nil {
		return err
	}
	s.cat.Store(st)
	return nil
}

func newCatalogState(snap *catalogv1.Snapshot) (*catalogState, error) {
	t, err := route.New(snap)
	if err != nil {
		return nil, fmt.Errorf("catalog snapshot %d: %w", snap.GetRevision(), err)
	}
	st := &catalogState{snap: snap, table: t, methods: map[string][]string{}, policies: snap.GetPolicies()}
	if st.policies == nil {
		st.policies = &catalogv1.ManifestPolicies{}
	}
	for _, m := range agtp.FloorMethods() {
		st.methods[m] = nil
	}
	for _, m := range snap.GetMethods() {
		st.methods[m.GetName()] = m.GetCategories()
	}
	//lint:ignore SA1019 the first release's catalogsvc sends the manifest only as bytes
	if manifest := jsondoc.PreferString(snap.GetManifest(), snap.GetManifestJson()); len(manifest) > 0 {
		var doc struct {
			DataManifest *struct {
				AvailableData []dataClass `json:"available_data"`
			} `json:"data_manifest"`
		}
		if err := json.Unmarshal(manifest, &doc); err != nil {
			return nil, fmt.Errorf("catalog snapshot %d: manifest: %w", snap.GetRevision(), err)
		}
		if doc.DataManifest != nil {
			st.data = make(map[string]dataClass, len(doc.DataManifest.AvailableData))
			for _, c := range doc.DataManifest.AvailableData {
				st.data[strings.ToLower(c.Class)] = c
			}
		}
	}
	return st, nil
}

// state returns the current catalog state, fetching a snapshot when the
// watch has not delivered one yet (a request that races startup).
func (s *Server) state(ctx context.Context) (*catalogState, error) {
	if st := s.cat.Load(); st != nil {
		return st, nil
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
	defer cancel()
	r, err := s.catalog.GetSnapshot(pctx, &catalogv1.GetSnapshotRequest{})
	if err != nil {
		if cerr := grpcerr.FromContext(ctx.Err()); cerr != nil {
			return nil, cerr
		}
		s.log.WarnContext(ctx, "catalog snapshot unavailable", "error", err)
		return nil, grpcerr.Unavailable("catalog-unavailable", "rcnssvc has no catalog snapshot yet; retry shortly")
	}
	if s.cat.Load() == nil {
		if err := s.setSnapshot(r.GetSnapshot()); err != nil {
			return nil, grpcerr.Internal(err)
		}
	}
	return s.cat.Load(), nil
}
