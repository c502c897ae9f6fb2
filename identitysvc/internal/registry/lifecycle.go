package registry

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Lifecycle event types (core §7.2.14–§7.2.18).
const (
	EventGenesisIssued       = "agent-genesis-issued"
	EventLifecycleSuspended  = "agent-lifecycle-suspended"
	EventLifecycleReinstated = "agent-lifecycle-reinstated"
	EventGenesisRevoked      = "agent-genesis-revoked"
	EventLifecycleDeprecated = "agent-lifecycle-deprecated"
)

// maxText bounds reason and actor, which end up in signed events.
const maxText = 1024

// How a lifecycle transition was authorised: the event's authorized_by.
const (
	// AuthorizedByOperator is an operator proven by its own certificate.
	AuthorizedByOperator = "operator"
	// AuthorizedByOperatorFingerprint is a client key on
	// OperatorFingerprints.
	AuthorizedByOperatorFingerprint = "operator_fingerprint"
	// AuthorizedByGenesisIssuer is the Genesis issuer's client key.
	AuthorizedByGenesisIssuer = "genesis_issuer"
	// AuthorizedByOpen is lifecycle_auth open: nothing was proven.
	AuthorizedByOpen = "open"
	// AuthorizedByRegistration is the ACTIVATE of RegisterGenesis with
	// activate.
	AuthorizedByRegistration = "registration"
)

// TransitionRequest is one lifecycle method call.
type TransitionRequest struct {
	AgentID    string
	Transition identityv1.LifecycleTransition
	Reason     string
	// Actor is a proven identity (an operator's, or "registration");
	// empty when the caller proved none.
	Actor string
	// ClaimedActor is what a front-door caller wrote as the AGTP actor
	// parameter: recorded as claimed_actor, never as actor.
	ClaimedActor string
	// SuccessorAgentID and MigrationDeadline are DEPRECATE parameters.
	SuccessorAgentID  string
	MigrationDeadline time.Time
	// ClientKeyFingerprint is the SHA-256 of the raw Ed25519 key of the
	// caller's verified TLS client certificate; empty when none.
	ClientKeyFingerprint string
	// Operator is the operator identity (kind/name) of a caller that
	// proved it with its own certificate; operators may run every
	// lifecycle method, in either lifecycle_auth mode.
	Operator string
	// CallerAgentID is recorded in the event.
	CallerAgentID string
}

// TransitionResult is the status document of core §7.2.14.
type TransitionResult struct {
	Status         identityv1.AgentStatus
	PreviousStatus identityv1.AgentStatus
	// EventType and AuditID are empty for a no-op.
	EventType string
	AuditID   string
	Noop      bool
	Agent     *Agent
}

// MethodName returns the AGTP method of a transition.
func MethodName(t identityv1.LifecycleTransition) string {
	switch t {
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE:
		return agtp.MethodActivate
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE:
		return agtp.MethodDeactivate
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE:
		return agtp.MethodReinstate
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE:
		return agtp.MethodRevoke
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE:
		return agtp.MethodDeprecate
	}
	return ""
}

// outcome is what a method does to an agent in a given state.
type outcome struct {
	to    string // new state
	event string
	noop  bool
	// impossible is the explanation of a 422; empty when possible.
	impossible string
	reason     string
}

// decide is the lifecycle table of core §7.2.14–18 (docs/identity.md,
// "Lifecycle").
// "pending" is a registered Genesis never activated: ACTIVATE issues it,
// REVOKE retires it, DEACTIVATE is a no-op (it is not active), REINSTATE
// and DEPRECATE have nothing to act on.
func decide(t identityv1.LifecycleTransition, from string, history bool) outcome {
	const (
		active, suspended, deprecated, retired, pending = callerpolicy.StateActive, callerpolicy.StateSuspended,
			callerpolicy.StateDeprecated, callerpolicy.StateRetired, callerpolicy.StatePending
	)
	retiredForever := outcome{impossible: "the agent is retired; REVOKE is permanent (core §7.2.16)", reason: ReasonAgentRetired}
	switch t {
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE:
		switch from {
		case active:
			return outcome{noop: true}
		case retired:
			return retiredForever
		}
		if from == pending && !history {
			return outcome{to: active, event: EventGenesisIssued}
		}
		// From suspended, or deprecated (cancelling the deprecation).
		return outcome{to: active, event: EventLifecycleReinstated}
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE:
		if from != active {
			return outcome{noop: true}
		}
		return outcome{to: suspended, event: EventLifecycleSuspended}
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE:
		switch from {
		case active:
			return outcome{noop: true}
		case retired:
			return retiredForever
		case pending:
			return outcome{impossible: "the agent was never activated; use ACTIVATE", reason: ReasonAgentNotActivated}
		}
		return outcome{to: active, event: EventLifecycleReinstated}
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE:
		if from == retired {
			return outcome{noop: true}
		}
		return outcome{to: retired, event: EventGenesisRevoked}
	case identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE:
		switch from {
		case deprecated:
			return outcome{noop: true}
		case retired:
			return retiredForever
		case pending:
			return outcome{impossible: "the agent was never activated", reason: ReasonAgentNotActivated}
		}
		// From active, or suspended (the domain-expiry path, core §11.8.1).
		return outcome{to: deprecated, event: EventLifecycleDeprecated}
	}
	return outcome{impossible: "unknown transition", reason: ReasonTransitionInvalid}
}

func checkTransitionRequest(req TransitionRequest) error {
	if !agtp.IsCanonicalID(req.AgentID) {
		return grpcerr.InvalidArgument(ReasonInvalidCanonicalID, "agent_id must be a canonical Agent-ID, 64 lowercase hex digits")
	}
	if MethodName(req.Transition) == "" {
		return grpcerr.InvalidArgument(ReasonTransitionInvalid, "transition must be ACTIVATE, DEACTIVATE, REINSTATE, REVOKE or DEPRECATE")
	}
	if req.Transition == identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE && req.Reason == "" {
		return grpcerr.InvalidArgument(ReasonReasonRequired, "REVOKE requires a reason (core §7.2.16)", "parameter", "reason")
	}
	if len(req.Reason) > maxText || len(req.Actor) > maxText || len(req.ClaimedActor) > maxText {
		return grpcerr.InvalidArgument(ReasonParameterInvalid, fmt.Sprintf("reason and actor are at most %d bytes", maxText))
	}
	isDeprecate := req.Transition == identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE
	if req.SuccessorAgentID != "" {
		if !isDeprecate {
			return grpcerr.InvalidArgument(ReasonParameterInvalid, "successor_agent_id is a DEPRECATE parameter", "parameter", "successor_agent_id")
		}
		if !agtp.IsCanonicalID(req.SuccessorAgentID) || req.SuccessorAgentID == req.AgentID {
			return grpcerr.InvalidArgument(ReasonParameterInvalid, "successor_agent_id must be another canonical Agent-ID", "parameter", "successor_agent_id")
		}
	}
	if !req.MigrationDeadline.IsZero() && !isDeprecate {
		return grpcerr.InvalidArgument(ReasonParameterInvalid, "migration_deadline is a DEPRECATE parameter", "parameter", "migration_deadline")
	}
	if req.ClientKeyFingerprint != "" && !agtp.IsCanonicalID(req.ClientKeyFingerprint) {
		return grpcerr.InvalidArgument(ReasonParameterInvalid, "client_key_fingerprint must be 64 lowercase hex digits")
	}
	return nil
}

// authorize applies core §7.2.19. Operators on the allowlist pass in
// either mode; in genesis_issuer mode everyone else must present the
// Genesis issuer's key. Failures are logged, as the draft requires. It
// returns how the call was authorised (an AuthorizedBy* value).
func (r *Registry) authorize(ctx context.Context, a *Agent, req TransitionRequest) (string, error) {
	if req.Operator != "" {
		r.log.InfoContext(ctx, "lifecycle transition by an operator", "method", MethodName(req.Transition), "agent_id", req.AgentID, "operator", req.Operator)
		return AuthorizedByOperator, nil
	}
	fp := req.ClientKeyFingerprint
	if fp != "" && slices.Contains(r.opts.OperatorFingerprints, fp) {
		return AuthorizedByOperatorFingerprint, nil
	}
	issuer := a.Record.GetIssuerFingerprint()
	if fp != "" && fp == issuer {
		return AuthorizedByGenesisIssuer, nil
	}
	if r.opts.LifecycleAuth == AuthOpen {
		return AuthorizedByOpen, nil
	}
	method := MethodName(req.Transition)
	if fp == "" {
		r.log.WarnContext(ctx, "lifecycle authorization failed: no verified client certificate",
			"method", method, "agent_id", req.AgentID, "lifecycle_auth", AuthGenesisIssuer)
		return "", grpcerr.Unauthenticated(ReasonCertRequired,
			"lifecycle_auth is genesis_issuer: "+method+" must arrive over mTLS with the Genesis issuer's certificate",
			"lifecycle_auth", AuthGenesisIssuer)
	}
	r.log.WarnContext(ctx, "lifecycle authorization failed: client key is not the Genesis issuer's",
		"method", method, "agent_id", req.AgentID, "lifecycle_auth", AuthGenesisIssuer, "client_key_fingerprint", fp)
	return "", grpcerr.PermissionDenied(ReasonIssuerMismatch,
		"lifecycle_auth is genesis_issuer: the client certificate's key is not the Genesis issuer's key",
		"lifecycle_auth", AuthGenesisIssuer)
}

// Transition runs one lifecycle method. A transition to the current state
// is a no-op with no event; an impossible one is 422. A real transition
// is serialised per agent across replicas: the signed event is appended
// to the agent's lifecycle stream through auditsvc first, and the state
// change commits only after that succeeded, so every state change has
// exactly one event and the events are in state order.
func (r *Registry) Transition(ctx context.Context, req TransitionRequest) (*TransitionResult, error) {
	return r.transition(ctx, req, true)
}

func (r *Registry) transition(ctx context.Context, req TransitionRequest, authorize bool) (*TransitionResult, error) {
	if err := checkTransitionRequest(req); err != nil {
		return nil, err
	}
	m, err := r.getRaw(ctx, req.AgentID)
	if err != nil {
		return nil, err
	}
	a := agentFromMap(req.AgentID, m)
	authorizedBy := AuthorizedByRegistration
	if authorize {
		if authorizedBy, err = r.authorize(ctx, a, req); err != nil {
			return nil, err
		}
	}
	// A no-op or refusal decided on one atomic read is consistent on its
	// own; only a real transition needs the lock.
	if res, done, err := settle(req, a, decide(req.Transition, m[fStatus], a.History)); done {
		return res, err
	}

	token, err := r.lock(ctx, req.AgentID)
	if err != nil {
		return nil, err
	}
	locked := true
	defer func() {
		if locked {
			r.unlock(req.AgentID, token)
		}
	}()
	// Re-read under the lock: another call may have moved the agent.
	if m, err = r.getRaw(ctx, req.AgentID); err != nil {
		return nil, err
	}
	a = agentFromMap(req.AgentID, m)
	out := decide(req.Transition, m[fStatus], a.History)
	if res, done, err := settle(req, a, out); done {
		return res, err
	}
	if out.to == callerpolicy.StateActive {
		// A label taken over from this agent while it was deprecated or
		// retired (core §6.5.9) stays with its new holder: the agent cannot
		// return to active under it. claimName takes the old holder's
		// lifecycle lock, held here, so the check and the commit are one
		// step against a takeover.
		if err := r.checkNameHeld(ctx, req, m[fName]); err != nil {
			return nil, err
		}
	}

	now := r.opts.Now().UTC()
	rev, _ := strconv.ParseUint(m[fRevision], 10, 64)
	updates := []any{
		fStatus, out.to,
		fRevision, strconv.FormatUint(rev+1, 10),
		fHistory, "1",
		fUpdatedAt, msString(now),
		fLastMethod, MethodName(req.Transition),
		fLastMethodAt, msString(now),
	}
	switch out.to {
	case callerpolicy.StateActive:
		// Activation cancels any deprecation (core §7.2.18).
		updates = append(updates, fActivatedAt, msString(now), fSuccessor, "", fDeadline, "")
	case callerpolicy.StateRetired:
		updates = append(updates, fRevokedAt, msString(now))
	case callerpolicy.StateDeprecated:
		deadline := ""
		if !req.MigrationDeadline.IsZero() {
			deadline = msString(req.MigrationDeadline)
		}
		updates = append(updates, fSuccessor, req.SuccessorAgentID, fDeadline, deadline)
	}
	next := make(map[string]string, len(m)+len(updates)/2)
	for k, v := range m {
		next[k] = v
	}
	for k, v := range pairsToMap(updates) {
		next[k] = v
	}
	after := agentFromMap(req.AgentID, next)

	claims, err := r.eventClaims(ctx, req, authorizedBy, m[fStatus], out, now, rev+1)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, r.opts.AuditTimeout)
	ev, err := auditclient.AppendLifecycleEvent(actx, r.audit, &auditv1.AppendLifecycleEventRequest{
		AgentId: req.AgentID, EventType: out.event, Claims: string(claims),
	})
	cancel()
	if err != nil {
		r.log.ErrorContext(ctx, "append lifecycle event failed; state unchanged", "agent_id", req.AgentID,
			"event_type", out.event, "err", err)
		if cerr := grpcerr.FromContext(ctx.Err()); cerr != nil {
			return nil, cerr
		}
		return nil, grpcerr.Unavailable(ReasonAuditUnavailable, "the lifecycle event could not be signed and stored; the agent's state is unchanged")
	}

	payload, err := eventPayload(req.AgentID, after.Record)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	args := append([]any{token, m[fRevision], rediskeys.AgentEvents, payload}, updates...)
	// The commit runs even if the caller has gone: the event is already
	// in the stream, and the state must follow it.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	res, err := commitScript.Run(cctx, r.rdb, []string{rediskeys.Agent(req.AgentID), rediskeys.AgentLifecycleLock(req.AgentID)}, args...).Int()
	ccancel()
	if err != nil || res != 1 {
		// The event was appended but the state did not change: only
		// possible when the lock expired under us or Redis failed.
		r.log.ErrorContext(ctx, "lifecycle event appended but state change not committed", "agent_id", req.AgentID,
			"event_type", out.event, "audit_id", ev.GetAuditId(), "result", res, "err", err)
		if err == nil {
			err = fmt.Errorf("commit refused (%d)", res)
		}
		return nil, grpcerr.Internal(fmt.Errorf("commit lifecycle transition of %s: %w", req.AgentID, err))
	}
	locked = false // the commit script released it
	r.log.InfoContext(ctx, "agent lifecycle transition", "agent_id", req.AgentID, "method", MethodName(req.Transition),
		"previous_status", m[fStatus], "status", out.to, "event_type", out.event, "audit_id", ev.GetAuditId(),
		"actor", req.Actor, "authorized_by", authorizedBy)
	return &TransitionResult{
		Status:         statusFromName(out.to),
		PreviousStatus: statusFromName(m[fStatus]),
		EventType:      out.event,
		AuditID:        ev.GetAuditId(),
		Agent:          after,
	}, nil
}

// settle answers a no-op or an impossible transition; done is false when
// there is a real transition to run.
func settle(req TransitionRequest, a *Agent, out outcome) (*TransitionResult, bool, error) {
	if out.noop {
		st := a.Record.GetStatus()
		return &TransitionResult{Status: st, PreviousStatus: st, Noop: true, Agent: a}, true, nil
	}
	if out.impossible != "" {
		return nil, true, grpcerr.FailedPrecondition(ReasonTransitionImpossible,
			MethodName(req.Transition)+": "+out.impossible,
			"lifecycle_state", callerpolicy.StateName(a.Record.GetStatus()), "cause", out.reason)
	}
	return nil, false, nil
}

// commitScript applies a transition if this call still holds the lock and
// nothing changed since it read the record, then releases the lock and
// announces the new record.
var commitScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[1], 'revision') ~= ARGV[2] then return -2 end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

func (r *Registry) getRaw(ctx context.Context, id string) (map[string]string, error) {
	vals, err := r.rdb.HMGet(ctx, rediskeys.Agent(id), recordFields...).Result()
	if err != nil {
		return nil, redisErr(ctx, "read agent", err)
	}
	m := make(map[string]string, len(recordFields))
	for i, f := range recordFields {
		s, _ := vals[i].(string)
		m[f] = s
	}
	if m[fStatus] == "" {
		return nil, grpcerr.NotFound(ReasonAgentNotFound, "no agent "+id+" is registered", "agent_id", id)
	}
	return m, nil
}

// lock takes the agent's lifecycle lock, waiting up to LockWait.
func (r *Registry) lock(ctx context.Context, id string) (string, error) {
	var b [16]byte
	crand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := rediskeys.AgentLifecycleLock(id)
	deadline := time.Now().Add(r.opts.LockWait)
	backoff := 2 * time.Millisecond
	for {
		ok, err := r.rdb.SetNX(ctx, key, token, r.opts.LockTTL).Result()
		if err != nil {
			return "", redisErr(ctx, "lifecycle lock", err)
		}
		if ok {
			return token, nil
		}
		wait := backoff/2 + rand.N(backoff)
		if time.Now().Add(wait).After(deadline) {
			return "", grpcerr.Unavailable(ReasonLifecycleBusy, "another lifecycle call on this agent is still running; retry")
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", grpcerr.FromContext(ctx.Err())
		case <-t.C:
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

func (r *Registry) unlock(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := releaseIfScript.Run(ctx, r.rdb, []string{rediskeys.AgentLifecycleLock(id)}, token).Err(); err != nil {
		r.log.Error("release lifecycle lock", "agent_id", id, "err", err)
	}
}

// eventClaims is the payload of the signed lifecycle event. The genesis
// event carries the full Genesis (core §6.5.6: "genesis record includes
// full Agent Genesis").
//
// Who acted is stated by proven facts only: authorized_by (how the call
// was authorised), actor (a proven identity: an operator's certificate),
// client_key_fingerprint and caller_agent_id (verified by the front
// door). What a front-door caller wrote as actor is claimed_actor.
func (r *Registry) eventClaims(ctx context.Context, req TransitionRequest, authorizedBy, from string, out outcome, now time.Time, rev uint64) ([]byte, error) {
	c := map[string]any{
		"event_type":      out.event,
		"agent_id":        req.AgentID,
		"method":          MethodName(req.Transition),
		"previous_status": from,
		// Not "status": in an audit payload that member is the AGTP
		// response status, an integer.
		"new_status":    out.to,
		"timestamp":     now.Format(time.RFC3339Nano),
		"revision":      rev,
		"authorized_by": authorizedBy,
	}
	for k, v := range map[string]string{
		"reason": req.Reason, "actor": req.Actor, "claimed_actor": req.ClaimedActor,
		"caller_agent_id": req.CallerAgentID, "client_key_fingerprint": req.ClientKeyFingerprint,
		"successor_agent_id": req.SuccessorAgentID,
	} {
		if v != "" {
			c[k] = v
		}
	}
	if !req.MigrationDeadline.IsZero() {
		c["migration_deadline"] = req.MigrationDeadline.UTC().Format(time.RFC3339)
	}
	if out.event == EventGenesisIssued {
		g, err := r.GetGenesis(ctx, req.AgentID)
		if err != nil {
			return nil, err
		}
		c["genesis"] = json.RawMessage(g)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("marshal lifecycle claims: %w", err))
	}
	return b, nil
}

// checkNameHeld refuses a return to active when the agent's label no
// longer maps to it: it was taken over after the agent was deprecated or
// retired (core §6.5.9). The caller holds the agent's lifecycle lock.
func (r *Registry) checkNameHeld(ctx context.Context, req TransitionRequest, name string) error {
	if name == "" {
		return nil
	}
	holder, err := r.rdb.Get(ctx, rediskeys.AgentName(name)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return redisErr(ctx, "read agent name", err)
	}
	if holder == req.AgentID {
		return nil
	}
	r.log.WarnContext(ctx, "lifecycle transition refused: the agent's label was taken over", "agent_id", req.AgentID,
		"method", MethodName(req.Transition), "name", name, "name_holder", holder)
	return grpcerr.Conflict(ReasonAgentNameTaken,
		fmt.Sprintf("%s: agent name %q was taken over by another agent; this agent cannot return to active under it (core §6.5.9)",
			MethodName(req.Transition), name), "name", name)
}
