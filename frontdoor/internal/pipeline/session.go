package pipeline

import (
	"sync"

	"github.com/agtpsuite/agtp/frontdoor/agtp"
	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
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

// checkSession binds or checks the request's Session-ID. Anonymous
// requests and requests from 0-RTT data (whose client identity is not yet
// proven) do not bind sessions.
func (p *Pipeline) checkSession(x *exchange) *agtp.Response {
	sid, ok := x.req.Header.Lookup(agtp.HeaderSessionID)
	if !ok || x.agentID == "" || x.conn.EarlyData {
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
