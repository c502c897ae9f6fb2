package server

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
)

// DefaultRetentionInterval is Options.RetentionInterval's default.
const DefaultRetentionInterval = 5 * time.Minute

// RetentionStats says what one run of the retention task did.
type RetentionStats struct {
	// Chains counts the chains looked at, Trimmed those records were
	// moved from, Moved the records moved, Failed the chains left as they
	// were because of an error (logged).
	Chains, Trimmed, Moved, Failed int
}

// retain runs Retain every RetentionInterval (with some jitter, so that
// replicas rarely run it at the same moment) until ctx is done.
func (s *Server) retain(ctx context.Context) {
	if s.moved == nil {
		return
	}
	for {
		d := s.opts.RetentionInterval
		d += time.Duration(mrand.Int64N(int64(d)/10 + 1))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		st, err := s.Retain(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.ErrorContext(ctx, "audit retention run failed", "err", err, "chains", st.Chains, "moved", st.Moved)
		case st.Moved > 0 || st.Failed > 0:
			s.log.InfoContext(ctx, "audit retention run", "chains", st.Chains, "trimmed", st.Trimmed, "moved", st.Moved, "failed", st.Failed)
		}
	}
}

// Retain moves the records stored longer than Options.Retention ago from
// every chain of every stream to the archive's moved files, and trims
// them from Redis behind a signed checkpoint (chain.Store.Trim). A chain
// that fails (a record or checkpoint that does not verify, Redis or the
// disk failing) is logged, counted and left as it is; the next run tries
// again. Running it again changes nothing until more records age.
func (s *Server) Retain(ctx context.Context) (RetentionStats, error) {
	var st RetentionStats
	if s.moved == nil {
		return st, errors.New("server: retention is not configured")
	}
	s.retainMu.Lock()
	defer s.retainMu.Unlock()
	defer s.moved.Close()
	cutoff := s.opts.Now().Add(-s.opts.Retention)
	var mu sync.Mutex
	var refs []chain.ChainRef
	err := s.store.ScanChains(ctx, func(r chain.ChainRef) error {
		mu.Lock()
		refs = append(refs, r)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return st, err
	}
	for _, r := range refs {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		st.Chains++
		res, err := s.store.Trim(ctx, r.Stream, r.Chain, cutoff, s.chainOptions(r.Stream, r.Chain), s.moved.Write)
		st.Moved += res.Moved
		if res.Moved > 0 {
			st.Trimmed++
		}
		if err != nil {
			st.Failed++
			s.log.ErrorContext(ctx, "audit retention: chain not trimmed", "stream", r.Stream, "chain", r.Chain,
				"moved", res.Moved, "err", fmt.Sprint(err))
		}
	}
	return st, nil
}
