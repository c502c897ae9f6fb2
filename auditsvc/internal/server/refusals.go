package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
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
			return
		case <-t.C:
			s.appendRefusalSummary(ctx)
		}
	}
}

// appendRefusalSummary appends the tally's window as one record: its
// refusals member maps each status to its count.
func (s *Server) appendRefusalSummary(ctx context.Context) {
	now := s.now().UTC()
	since, counts := s.refusals.take(now)
	if len(counts) == 0 {
		return
	}
	byStatus := map[string]uint64{}
	var total uint64
	for st, n := range counts {
		byStatus[strconv.Itoa(st)] = n
		total += n
	}
	refusals, _ := json.Marshal(byStatus)
	p := attribution.Payload{
		ServerID:  s.opts.ServerID,
		Timestamp: now.Format(time.RFC3339Nano),
		EventType: "anonymous-refusals",
		Extra: map[string]json.RawMessage{
			"refusals":     refusals,
			"total":        json.RawMessage(strconv.FormatUint(total, 10)),
			"window_start": json.RawMessage(strconv.Quote(since.UTC().Format(time.RFC3339Nano))),
			"window_end":   json.RawMessage(strconv.Quote(now.Format(time.RFC3339Nano))),
		},
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.store.Append(actx, StreamRefusals, rediskeys.ServerChain, p, nil); err != nil {
		s.refusals.putBack(since, counts)
		s.log.WarnContext(ctx, "anonymous refusal summary not appended; kept for the next one", "total", total, "error", fmt.Sprint(err))
	}
}
