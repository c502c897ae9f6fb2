package server

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// handoff passes an evaluation's result to whoever still waits for it:
// the PROPOSE call when it finishes in time, else the proposal record.
type handoff struct {
	mu    sync.Mutex
	done  bool
	async bool
	resp  *rcnsv1.ProposeResponse
	err   error
	ch    chan struct{}
}

// evaluateMaybeAsync runs the evaluation and answers with it when it ends
// within AsyncAfter; otherwise it answers 261 with a proposal_id that
// GetProposal (QUERY /proposals/{proposal_id}, core §11.3) polls. The
// evaluation runs detached from the call, bounded by EvaluationTimeout.
func (s *Server) evaluateMaybeAsync(ctx context.Context, ev *evaluation) (*rcnsv1.ProposeResponse, error) {
	timeout := s.opts.Propose.EvaluationTimeout
	if s.opts.Propose.AsyncAfter == 0 {
		ectx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return s.evaluate(ectx, ev)
	}
	agentID := ev.caller.GetAgentId()
	proposalID := newID(prefixProposal)
	h := &handoff{ch: make(chan struct{})}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	s.async.Add(1)
	go func() {
		defer s.async.Done()
		defer cancel()
		resp, err := s.evaluate(ectx, ev)
		h.mu.Lock()
		h.done, h.resp, h.err = true, resp, err
		async := h.async
		h.mu.Unlock()
		close(h.ch)
		if async {
			s.finishProposal(context.WithoutCancel(ctx), agentID, proposalID, resp, err)
		}
	}()
	timer := time.NewTimer(s.opts.Propose.AsyncAfter)
	defer timer.Stop()
	select {
	case <-h.ch:
		return h.resp, h.err
	case <-timer.C:
	case <-ctx.Done():
	}
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return h.resp, h.err
	}
	h.async = true
	h.mu.Unlock()
	deadline := s.now().Add(timeout)
	if err := pendingScript.Run(context.WithoutCancel(ctx), s.rdb, []string{rediskeys.RCNSProposal(agentID, proposalID)},
		deadline.UnixMilli(), s.opts.Propose.ProposalTTL.Milliseconds(), ev.negID).Err(); err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("proposal record: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return nil, grpcerr.FromContext(err)
	}
	return inProgress(proposalID, ev.negID, deadline.Sub(s.now())), nil
}

// inProgress is 261: the body holds proposal_id and an estimated
// evaluation time (core §5.6); the Negotiation-ID rides along.
func inProgress(proposalID, negID string, remaining time.Duration) *rcnsv1.ProposeResponse {
	resp := answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_IN_PROGRESS, agtp.StatusNegotiationInProgress, negID, map[string]any{
		"proposal_id":       proposalID,
		"estimated_seconds": int64(math.Ceil(max(remaining, time.Second).Seconds())),
		"poll":              map[string]string{"method": "QUERY", "path": "/proposals/" + proposalID},
		"explanation":       "the proposal is being evaluated; poll QUERY /proposals/" + proposalID + " for 263 or 463",
	})
	resp.ProposalId = proposalID
	return resp
}

// pendingScript writes the pending record unless the evaluation already
// stored its result (it may finish between the 261 decision and this).
var pendingScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'state', 'pending', 'deadline', ARGV[1], 'negotiation_id', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`)

func (s *Server) finishProposal(ctx context.Context, agentID, proposalID string, resp *rcnsv1.ProposeResponse, err error) {
	if err != nil {
		code, reason, explanation, _ := grpcerr.Reason(err)
		status := grpcerr.StatusFor(code)
		resp = answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_UNSPECIFIED, status, "", failBody(reason, explanation, nil))
	}
	resp.ProposalId = proposalID
	b, merr := proto.Marshal(resp)
	if merr != nil {
		s.log.ErrorContext(ctx, "proposal result not encoded", "proposal_id", proposalID, "error", merr)
		return
	}
	key := rediskeys.RCNSProposal(agentID, proposalID)
	_, werr := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "state", "done", "result", b)
		p.PExpire(ctx, key, s.opts.Propose.ProposalTTL)
		return nil
	})
	if werr != nil {
		s.log.ErrorContext(ctx, "proposal result not stored", "proposal_id", proposalID, "error", werr)
	}
}

// GetProposal polls a PROPOSE that answered 261. Only the proposing agent
// can poll it; another agent's ID is unknown (404).
func (s *Server) GetProposal(ctx context.Context, req *rcnsv1.GetProposalRequest) (*rcnsv1.GetProposalResponse, error) {
	if !validID(prefixProposal, req.GetProposalId()) || !validAgentID(req.GetAgentId()) {
		return nil, grpcerr.NotFound("proposal-not-found", "no proposal with that proposal_id")
	}
	m, err := s.rdb.HGetAll(ctx, rediskeys.RCNSProposal(req.GetAgentId(), req.GetProposalId())).Result()
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("proposal load: %w", err))
	}
	switch m["state"] {
	case "done":
		var resp rcnsv1.ProposeResponse
		if err := proto.Unmarshal([]byte(m["result"]), &resp); err != nil {
			return nil, grpcerr.Internal(fmt.Errorf("proposal %s: %w", req.GetProposalId(), err))
		}
		return &rcnsv1.GetProposalResponse{Result: &resp}, nil
	case "pending":
		deadline, _ := strconv.ParseInt(m["deadline"], 10, 64)
		remaining := time.UnixMilli(deadline).Sub(s.now())
		if remaining > 0 {
			return &rcnsv1.GetProposalResponse{Result: inProgress(req.GetProposalId(), m["negotiation_id"], remaining)}, nil
		}
		// The evaluating replica stopped before it stored a result.
		resp := rejected(m["negotiation_id"], agtp.ReasonCompositionImpossible, "the evaluation did not complete; PROPOSE again", nil)
		resp.ProposalId = req.GetProposalId()
		return &rcnsv1.GetProposalResponse{Result: resp}, nil
	}
	return nil, grpcerr.NotFound("proposal-not-found", "no proposal with that proposal_id")
}
