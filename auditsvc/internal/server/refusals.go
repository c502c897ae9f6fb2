package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// StreamRefusals is the server chain's stream of refusal summaries.
const StreamRefusals = "refusals"

// DefaultRefusalSummaryInterval is Options.RefusalSummaryInterval's
// default.
const DefaultRefusalSummaryInterval = time.Minute

// refusalTally counts the anonymous refusals signed unchained since the
// last summary, by status. Its size is bounded by the number of statuses
// (900 at most), whatever the traffic.
type refusalTally struct {
	mu     sync.Mutex
	since  time.Time
	counts map[int]uint64
}

func (t *refusalTally) add(status int, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts, t.since = map[int]uint64{}, now
	}
	t.counts[status]++
}

// take returns the counts since the last take and starts a new window.
func (t *refusalTally) take(now time.Time) (since time.Time, counts map[int]uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	since, counts = t.since, t.counts
	t.counts, t.since = nil, time.Time{}
	return since, counts
}

// putBack returns counts a failed summary did not record to the tally, so
// the next summary carries them.
func (t *refusalTally) putBack(since time.Time, counts map[int]uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts, t.since = map[int]uint64{}, since
	}
	for st, n := range counts {
		t.counts[st] += n
	}
	if since.Before(t.since) {
		t.since = since
	}
}

// signUnchained answers SignAndAppend with unchained set: a signed record
// of an anonymous refusal that is not stored, and one more in the tally.
func (s *Server) signUnchained(c string, req *auditv1.SignAndAppendRequest, p attribution.Payload) (*auditv1.SignAndAppendResponse, error) {
	switch {
	case c != rediskeys.ServerChain:
		return nil, grpcerr.InvalidArgument("audit-unchained-invalid", "unchained records are for anonymous requests: chain_agent_id must be empty")
	case p.Status < 400:
		return nil, grpcerr.InvalidArgument("audit-unchained-invalid", "unchained records are for refusals: status must be 400 or above")
	case req.GetIdempotentOutcome() != nil:
		return nil, grpcerr.InvalidArgument("audit-unchained-invalid", "an unchained record stores nothing, so it cannot carry an idempotent outcome")
	}
	p.PreviousAuditID = strings.Repeat("0", 64)
	if p.Extra == nil {
		p.Extra = map[string]json.RawMessage{}
	}
	p.Extra["unchained"] = json.RawMessage("true")
	jws, id, err := s.store.Signer().SignPayload(&p)
	if err != nil {
		return nil, grpcerr.InvalidArgument("audit-claims-invalid", err.Error())
	}
	s.refusals.add(p.Status, s.now())
	return &auditv1.SignAndAppendResponse{AttributionRecord: jws, AuditId: id, PreviousAuditId: p.PreviousAuditID}, nil
}

// summarizeRefusals appends, every interval, one signed summary of the
// anonymous refusals signed unchained in it to the server chain's refusals
// stream, until ctx ends (then once more, so a drain loses no count).
func (s *Server) summarizeRefusals(ctx context.Context) {
	t := time.NewTicker(s.opts.RefusalSummaryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.appendRefusalSummary(context.WithoutCancel(ctx))
			s.summaryMu.Lock()
			if ps := s.summary; ps != nil {
				s.log.ErrorContext(ctx, "anonymous refusal summary unanswered at shutdown; it may or may not be in the refusals stream",
					"total", ps.total, "refusals", string(ps.p.Extra["refusals"]), "window_start", ps.since, "request_id", ps.req.ID)
			}
			s.summaryMu.Unlock()
			return
		case <-t.C:
			s.appendRefusalSummary(ctx)
		}
	}
}

// pendingSummary is a refusal summary on its way to the store: its
// payload and request ID are fixed when it is made, so that every attempt
// is the same request and the store appends it once
// (chain.Store.AppendOnce).
type pendingSummary struct {
	since  time.Time
	counts map[int]uint64
	total  uint64
	p      attribution.Payload
	req    chain.Request
	// made is when the first attempt was sent: the store remembers the
	// request ID for the request window from then on.
	made time.Time
}

// appendRefusalSummary appends the pending summary, if an earlier call
// left one, then the tally's window as a new one: its refusals member
// maps each status to its count.
func (s *Server) appendRefusalSummary(ctx context.Context) {
	s.summaryMu.Lock()
	defer s.summaryMu.Unlock()
	if s.summary != nil && !s.flushSummary(ctx) {
		return
	}
	now := s.now().UTC()
	since, counts := s.refusals.take(now)
	if len(counts) == 0 {
		return
	}
	ps, err := newSummary(s.opts.ServerID, since, now, counts)
	if err != nil {
		s.refusals.putBack(since, counts)
		s.log.ErrorContext(ctx, "anonymous refusal summary not made; kept for the next one", "error", err)
		return
	}
	s.summary = ps
	s.flushSummary(ctx)
}

// newSummary makes the pending summary of counts, refused between since
// and now.
func newSummary(serverID string, since, now time.Time, counts map[int]uint64) (*pendingSummary, error) {
	byStatus := map[string]uint64{}
	var total uint64
	for st, n := range counts {
		byStatus[strconv.Itoa(st)] = n
		total += n
	}
	refusals, _ := json.Marshal(byStatus)
	p := attribution.Payload{
		ServerID:  serverID,
		Timestamp: now.Format(time.RFC3339Nano),
		EventType: "anonymous-refusals",
		Extra: map[string]json.RawMessage{
			"refusals":     refusals,
			"total":        json.RawMessage(strconv.FormatUint(total, 10)),
			"window_start": json.RawMessage(strconv.Quote(since.UTC().Format(time.RFC3339Nano))),
			"window_end":   json.RawMessage(strconv.Quote(now.Format(time.RFC3339Nano))),
		},
	}
	body, err := p.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode refusal summary: %w", err)
	}
	sum := sha256.Sum256(body)
	return &pendingSummary{since: since, counts: counts, total: total, p: p, made: now,
		req: chain.Request{ID: "refusals-" + rand.Text(), Fingerprint: hex.EncodeToString(sum[:])}}, nil
}

// flushSummary sends the pending summary and reports whether it is
// settled: appended (now or by an earlier attempt whose answer was lost),
// or certainly not appended, its counts then back in the tally. An
// unknown outcome (chain.ErrUnavailable, a timeout, ...) keeps it for the
// next call, which sends the same request again: putting the counts back
// then would count them twice if the lost attempt had appended.
func (s *Server) flushSummary(ctx context.Context) bool {
	ps := s.summary
	if s.now().Sub(ps.made) >= s.requestWindow() {
		// The store no longer remembers the request ID, so another attempt
		// could append the summary a second time, and whether an earlier
		// one did cannot be learned: the counts are logged, not recorded.
		s.summary = nil
		s.log.ErrorContext(ctx, "anonymous refusal summary unanswered for the request window; its counts are not recorded",
			"total", ps.total, "refusals", string(ps.p.Extra["refusals"]), "window_start", ps.since, "request_id", ps.req.ID)
		return true
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := s.store.AppendOnce(actx, StreamRefusals, rediskeys.ServerChain, ps.p, nil, ps.req)
	switch {
	case err == nil:
		s.summary = nil
		return true
	case errors.Is(err, chain.ErrInvalid), errors.Is(err, chain.ErrRequestReused):
		// Refused before anything was written.
		s.summary = nil
		s.refusals.putBack(ps.since, ps.counts)
		s.log.WarnContext(ctx, "anonymous refusal summary refused; its counts go into the next one", "total", ps.total, "error", fmt.Sprint(err))
		return true
	}
	s.log.WarnContext(ctx, "anonymous refusal summary not answered; the same request is sent again with the next one",
		"total", ps.total, "request_id", ps.req.ID, "error", fmt.Sprint(err))
	return false
}

// requestWindow is how long the store remembers a request ID.
func (s *Server) requestWindow() time.Duration {
	if w := s.opts.Chain.RequestWindow; w > 0 {
		return w
	}
	return chain.DefaultRequestWindow
}
