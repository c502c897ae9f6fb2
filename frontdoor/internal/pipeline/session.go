package pipeline

import (
	"encoding/json"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// sessionCache remembers Session-ID bindings identitysvc has confirmed,
// so a session costs one ResolveAgent call on first sight and none after
// (core §10.4.5: Session-ID, Agent-ID and the TLS client identity must
// agree). A binding never changes once made, so a confirmed one stays
// true; the cache is bounded and simply cleared when full.
type sessionCache struct {
	mu    sync.RWMutex
	bound map[string]string // Session-ID -> Agent-ID + "|" + client key fingerprint
}

const maxSessions = 100_000

func (c *sessionCache) confirmed(sessionID, binding string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.bound[sessionID] == binding
}

func (c *sessionCache) remember(sessionID, binding string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound == nil || len(c.bound) >= maxSessions {
		c.bound = map[string]string{}
	}
	c.bound[sessionID] = binding
}

// DropSession forgets a confirmed binding, so the next request of the
// session is checked with identitysvc again (after SUSPEND or RESUME).
func (p *Pipeline) DropSession(sessionID string) {
	p.sessions.mu.Lock()
	delete(p.sessions.bound, sessionID)
	p.sessions.mu.Unlock()
}

// suspend runs SUSPEND (core §7.2.12): a session of the caller, or, with
// synthesis_id, the release of the caller's synthesized contract.
func (p *Pipeline) suspend(x *exchange, params map[string]any) *agtp.Response {
	if x.agentID == "" {
		return x.fail(agtp.StatusUnauthorized, "agent-unauthenticated", "SUSPEND needs Agent-ID", nil)
	}
	if id := str(params, "synthesis_id"); id != "" {
		if p.RCNS == nil {
			return x.fail(agtp.StatusNotFound, "contract-not-found", "this server has no synthesized contracts", nil)
		}
		r, err := p.RCNS.RevokeContract(x.ctx, &rcnsv1.RevokeContractRequest{Caller: p.rcnsCaller(x), SynthesisId: id, Reason: str(params, "reason"), Release: true})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, contractJSON(r.GetContract()))
	}
	sid := str(params, "session_id")
	if sid == "" {
		return x.fail(agtp.StatusBadRequest, "session-id-required", "SUSPEND needs session_id (or synthesis_id)", nil)
	}
	in := &identityv1.SuspendSessionRequest{SessionId: sid, AgentId: x.agentID, Reason: str(params, "reason")}
	if rb := str(params, "resume_by"); rb != "" {
		t, err := time.Parse(time.RFC3339, rb)
		if err != nil {
			return x.fail(agtp.StatusBadRequest, "resume-by-invalid", "resume_by must be an RFC 3339 time", nil)
		}
		in.ResumeBy = timestamppb.New(t)
	}
	if cp, ok := params["checkpoint"]; ok {
		in.CheckpointJson, _ = json.Marshal(cp)
	}
	r, err := p.Identity.SuspendSession(x.ctx, in)
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	p.DropSession(sid)
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
		"suspension_id": r.GetSuspensionId(), "session_id": r.GetSessionId(), "resumption_nonce": r.GetResumptionNonce(),
		"resume_by": r.GetResumeBy().AsTime().UTC().Format(time.RFC3339), "status": r.GetStatus(),
	})
}

// resume runs RESUME with the nonce SUSPEND returned.
func (p *Pipeline) resume(x *exchange, params map[string]any) *agtp.Response {
	if x.agentID == "" {
		return x.fail(agtp.StatusUnauthorized, "agent-unauthenticated", "RESUME needs Agent-ID", nil)
	}
	sid := str(params, "session_id")
	r, err := p.Identity.ResumeSession(x.ctx, &identityv1.ResumeSessionRequest{SessionId: sid, AgentId: x.agentID, ResumptionNonce: str(params, "resumption_nonce")})
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	p.DropSession(sid)
	body := map[string]any{"session_id": r.GetSessionId(), "suspension_id": r.GetSuspensionId(), "status": r.GetStatus()}
	if len(r.GetCheckpointJson()) > 0 {
		body["checkpoint"] = json.RawMessage(r.GetCheckpointJson())
	}
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, body)
}

// checkSession binds or checks the request's Session-ID. Anonymous
// requests and requests from 0-RTT data (whose client identity is not yet
// proven) do not bind sessions.
func (p *Pipeline) checkSession(x *exchange) *agtp.Response {
	sid, ok := x.req.Header.Lookup(agtp.HeaderSessionID)
	if !ok || x.agentID == "" || x.conn.EarlyData {
		return nil
	}
	// RESUME is how a suspended session is reached again; it checks the
	// binding itself, with the nonce.
	if x.decision.Method == "RESUME" {
		return nil
	}
	if !sessionbind.Valid(sid) {
		return x.fail(agtp.StatusBadRequest, sessionbind.ReasonInvalid,
			"Session-ID must be 22 to 256 visible ASCII characters carrying at least 128 random bits", nil)
	}
	fp := clientKeyFingerprint(x)
	binding := x.agentID + "|" + fp
	if p.sessions.confirmed(sid, binding) {
		return nil
	}
	_, err := p.Identity.ResolveAgent(x.ctx, &identityv1.ResolveAgentRequest{AgentId: x.agentID, SessionId: sid, ClientKeyFingerprint: fp})
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	p.sessions.remember(sid, binding)
	return nil
}
