// Package server implements catalogv1.CatalogServiceServer: it holds the
// current configuration (catalog, policy, endpoints, manifest, route
// table), reloads it when the endpoints directory or the runtime
// endpoints in Redis change, and fans every new snapshot out to
// WatchSnapshot streams.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/catalogsvc/demo"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalogdata"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/internal/registry"
	"github.com/agtpsuite/agtp/catalogsvc/internal/store"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

// Limits on the endpoints directory.
const (
	maxFiles     = 2000
	maxFileBytes = 1 << 20
)

type versioner interface {
	Version(ctx context.Context, hash string, now time.Time) (registry.Version, error)
}

// Server is the catalog service.
type Server struct {
	catalogv1.UnimplementedCatalogServiceServer

	log    *slog.Logger
	opts   Options
	cfg    registry.Config
	store  *store.Redis // nil without Redis
	vers   versioner
	signer *manifest.Signer
	fsys   fs.FS // endpoints directory, or the demo set, or nil

	state atomic.Pointer[registry.State]

	// mu serialises rebuilds and admin writes.
	mu           sync.Mutex
	files        []registry.File
	filesHash    string
	pendingFiles []registry.File
	pendingHash  string
	loadErr      atomic.Pointer[errorBox]

	wmu      sync.Mutex
	watchers map[chan struct{}]struct{}

	now func() time.Time
}

type errorBox struct{ err error }

// New loads the catalog and the endpoints and builds the first
// configuration. A broken configuration fails here, before the service
// serves anything. rdb may be nil: the admin RPCs then answer
// Unavailable and the version counter lives in memory.
func New(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	data := catalogdata.Default
	if opts.CatalogFile != "" {
		b, err := os.ReadFile(opts.CatalogFile)
		if err != nil {
			return nil, fmt.Errorf("catalogsvc: catalog: %w", err)
		}
		data = b
	}
	cat, err := catalog.Load(data)
	if err != nil {
		return nil, fmt.Errorf("catalogsvc: %w", err)
	}
	s := &Server{
		log:      log,
		opts:     opts,
		watchers: map[chan struct{}]struct{}{},
		now:      time.Now,
		cfg: registry.Config{
			Catalog: cat,
			Service: registry.Service{
				Methods:          opts.Methods,
				Toggles:          opts.Toggles,
				BuiltinOverrides: opts.BuiltinOverrides,
			},
			Manifest:  opts.Manifest,
			Functions: opts.Functions,
			Recipes:   opts.Recipes,
			LookupEnv: opts.LookupEnv,
		},
	}
	if opts.SigningKey != nil {
		if s.signer, err = manifest.NewSigner(opts.SigningKey, opts.SigningKeyID); err != nil {
			return nil, fmt.Errorf("catalogsvc: %w", err)
		}
	}
	if rdb != nil {
		s.store = store.NewRedis(rdb, opts.MaxRuntimeEndpoints)
		s.vers = s.store
	} else {
		s.vers = store.NewMemory(time.Now())
	}
	switch {
	case opts.EndpointsDir != "":
		st, err := os.Stat(opts.EndpointsDir)
		if err != nil {
			return nil, fmt.Errorf("catalogsvc: endpoints directory: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("catalogsvc: endpoints directory %s is not a directory", opts.EndpointsDir)
		}
		s.fsys = os.DirFS(opts.EndpointsDir)
	case opts.DemoEndpoints:
		s.fsys = demo.FS
	}
	for _, w := range cat.Warnings {
		log.Warn("catalog entry skipped", "catalog_version", cat.Version, "detail", w)
	}
	if _, err := s.readFiles(); err != nil {
		return nil, err
	}
	if err := s.rebuild(ctx, "start"); err != nil {
		return nil, err
	}
	return s, nil
}

// State returns the configuration being served.
func (s *Server) State() *registry.State { return s.state.Load() }

// LoadError is the last reload failure (nil after a good reload); the old
// configuration keeps serving meanwhile.
func (s *Server) LoadError() error {
	if b := s.loadErr.Load(); b != nil {
		return b.err
	}
	return nil
}

// readFiles reads the endpoints directory and reports whether its
// content changed since the last read. Content, not mtimes, is compared:
// directories are small, and a rewrite within one mtime tick is still
// seen.
func (s *Server) readFiles() (bool, error) {
	if s.fsys == nil {
		return false, nil
	}
	entries, err := fs.ReadDir(s.fsys, ".")
	if err != nil {
		return false, fmt.Errorf("catalogsvc: endpoints directory: %w", err)
	}
	var files []registry.File
	h := sha256.New()
	for _, e := range entries {
		if e.IsDir() || !registry.IsDefinitionFile(e.Name()) {
			continue
		}
		if len(files) == maxFiles {
			return false, fmt.Errorf("catalogsvc: endpoints directory holds more than %d files", maxFiles)
		}
		info, err := e.Info()
		if err != nil {
			return false, fmt.Errorf("catalogsvc: %s: %w", e.Name(), err)
		}
		if info.Size() > maxFileBytes {
			return false, fmt.Errorf("catalogsvc: %s is %d bytes, more than %d", e.Name(), info.Size(), maxFileBytes)
		}
		b, err := fs.ReadFile(s.fsys, e.Name())
		if err != nil {
			return false, fmt.Errorf("catalogsvc: %s: %w", e.Name(), err)
		}
		files = append(files, registry.File{Name: e.Name(), Data: b})
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	if sum == s.filesHash {
		return false, nil
	}
	s.pendingFiles, s.pendingHash = files, sum
	return true, nil
}

// rebuild builds a configuration from the pending (or current) files and
// the runtime endpoints, and publishes it when it differs. On failure the
// current configuration stays.
func (s *Server) rebuild(ctx context.Context, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rebuildLocked(ctx, why, nil)
}

// rebuildLocked is rebuild with s.mu held. extra, when set, is a runtime
// entry being admitted (it replaces any stored entry of its key).
func (s *Server) rebuildLocked(ctx context.Context, why string, extra *registry.Runtime) error {
	files, hash := s.files, s.filesHash
	if s.pendingFiles != nil {
		files, hash = s.pendingFiles, s.pendingHash
	}
	runtime, err := s.runtime(ctx)
	if err != nil {
		return s.failed(why, err)
	}
	if extra != nil {
		runtime = slices.DeleteFunc(runtime, func(r registry.Runtime) bool { return r.Key == extra.Key })
		runtime = append(runtime, *extra)
	}
	draft, err := registry.Build(s.cfg, files, runtime)
	if err != nil {
		err = &ConfigError{Err: err}
		if extra != nil {
			return err
		}
		if s.pendingFiles != nil {
			// The directory is broken: forget it until it changes again,
			// and keep serving the last good files.
			s.filesHash = s.pendingHash
			s.pendingFiles = nil
		}
		return s.failed(why, err)
	}
	if extra != nil {
		return nil // a dry run for the admin API
	}
	s.files, s.filesHash, s.pendingFiles = files, hash, nil
	if cur := s.state.Load(); cur != nil && cur.Draft.ContentHash == draft.ContentHash {
		s.loadErr.Store(nil)
		return nil
	}
	v, err := s.vers.Version(ctx, draft.ContentHash, s.now())
	if err != nil {
		return s.failed(why, err)
	}
	st, err := draft.Finalize(v, s.signer)
	if err != nil {
		return s.failed(why, err)
	}
	for _, w := range draft.Warnings() {
		s.log.Warn("catalog configuration", "detail", w)
	}
	s.state.Store(st)
	s.loadErr.Store(nil)
	s.log.Info("catalog configuration published", "reason", why, "revision", st.Snapshot.GetRevision(),
		"api_version", st.Snapshot.GetApiVersion(), "endpoints", len(st.Snapshot.GetEndpoints()), "etag", st.ETag)
	s.notify()
	return nil
}

func (s *Server) failed(why string, err error) error {
	s.loadErr.Store(&errorBox{err: err})
	s.log.Error("catalog configuration refused; the previous one keeps serving", "reason", why, "error", err)
	return err
}

func (s *Server) runtime(ctx context.Context) ([]registry.Runtime, error) {
	if s.store == nil {
		return nil, nil
	}
	rt, stored, err := s.store.Endpoints(ctx)
	if err != nil {
		return nil, err
	}
	if stored > len(rt) {
		// Refusing the hash would stop every replica on this Redis; serve
		// the part within the limit and tell the operator to delete the rest.
		s.log.Error("runtime endpoints over the limit; only the first by key are loaded",
			"stored", stored, "loaded", len(rt), "limit", s.store.MaxEndpoints())
	}
	return rt, nil
}

// notify wakes every watcher; each reads the newest state, so a slow
// watcher skips intermediate snapshots instead of blocking anyone.
func (s *Server) notify() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *Server) addWatcher() chan struct{} {
	ch := make(chan struct{}, 1)
	s.wmu.Lock()
	s.watchers[ch] = struct{}{}
	s.wmu.Unlock()
	return ch
}

func (s *Server) removeWatcher(ch chan struct{}) {
	s.wmu.Lock()
	delete(s.watchers, ch)
	s.wmu.Unlock()
}

// Run reloads on directory changes, Redis change events and the resync
// interval until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	var poll, resync <-chan time.Time
	if s.fsys != nil && s.opts.ReloadInterval > 0 && s.opts.EndpointsDir != "" {
		t := time.NewTicker(s.opts.ReloadInterval)
		defer t.Stop()
		poll = t.C
	}
	var events <-chan *redis.Message
	if s.store != nil {
		ps := s.store.Subscribe(ctx)
		defer ps.Close()
		events = ps.Channel()
		if s.opts.ResyncInterval > 0 {
			t := time.NewTicker(s.opts.ResyncInterval)
			defer t.Stop()
			resync = t.C
		}
		// Changes made between New and the subscription are picked up here.
		_ = s.rebuild(ctx, "subscribed")
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll:
			changed, err := s.readFiles()
			if err != nil {
				_ = s.failed("directory", err)
				continue
			}
			if changed {
				_ = s.rebuild(ctx, "directory changed")
			}
		case msg, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			_ = s.rebuild(ctx, "runtime endpoint "+msg.Payload)
		case <-resync:
			_ = s.rebuild(ctx, "resync")
		}
	}
}

// ConfigError is a configuration that failed validation (as opposed to
// a failure to reach Redis).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }
