package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// instantiate turns an approved proposal into a contract, promotes it
// into the catalog when persistence was asked for and granted, audits it,
// and answers 263.
func (s *Server) instantiate(ctx context.Context, ev *evaluation, pat *recipe.Pattern, def map[string]any, scopes []string) (*rcnsv1.ProposeResponse, error) {
	p, negID := ev.p, ev.negID
	if len(scopes) > 0 {
		def["required_scopes"] = scopes
	} else {
		delete(def, "required_scopes")
	}
	def["handler"] = map[string]any{"type": endpoint.HandlerComposition, "recipe": pat.RecipeName}
	ep, err := recipe.CompileDefinition(def, endpoint.Context{})
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("instantiate %s: %w", pat.RecipeName, err))
	}
	now := s.now()
	ttl := s.opts.Propose.SessionTTL
	persistent := false
	var refused map[string]any
	var apiVersion string
	// promoted is the promotion's claim and pending-unpromote entry, set
	// once the pair is claimed.
	var promoted *unpromoteEntry
	if p.persistent {
		if s.grantsPersistence(ev) {
			pttl := s.opts.Propose.PersistentTTL
			if p.requestedDuration > 0 && p.requestedDuration < pttl {
				pttl = p.requestedDuration
			}
			// Claim the pair first (step 7 read a snapshot, and PutEndpoint
			// replaces what the key holds): one contract promotes it.
			e := unpromoteEntry{SynthesisID: newID(prefixSynthesis), Method: ep.Def.Method, Path: ep.Def.Path}
			ok, err := s.claimPromotion(ctx, e.Method, e.Path, e.SynthesisID, now.Add(pttl).UnixMilli()+s.opts.Contracts.TombstoneRetention.Milliseconds())
			if err != nil {
				return nil, grpcerr.Internal(err)
			}
			if !ok {
				return rejected(negID, agtp.ReasonPolicyRefused, e.Method+" "+e.Path+" is promoted into the catalog by another persistent contract", nil), nil
			}
			// Until the contract is stored, the queue entry is what removes
			// the endpoint and frees the claim should this replica stop.
			if err := s.rdb.ZAdd(ctx, rediskeys.RCNSUnpromoteQueue, redis.Z{Score: float64(now.Add(s.promotionGuard()).UnixMilli()), Member: e.member()}).Err(); err != nil {
				s.releasePromotion(context.WithoutCancel(ctx), e.Method, e.Path, e.SynthesisID)
				return nil, grpcerr.Internal(fmt.Errorf("pending unpromote: %w", err))
			}
			promoted = &e
			pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
			def, _ := jsondoc.Struct(ep.JSON) // json.Marshal of the definition: an object
			r, perr := s.catalog.PutEndpoint(pctx, &catalogv1.PutEndpointRequest{Definition: def, Tier: catalogv1.EndpointTier_ENDPOINT_TIER_C})
			cancel()
			if perr != nil {
				_, reason, explanation, _ := grpcerr.Reason(perr)
				refused = map[string]any{"reason": reason, "explanation": "the catalog refused the promotion: " + explanation}
				if refusedOutright(perr) {
					s.releasePromotion(context.WithoutCancel(ctx), e.Method, e.Path, e.SynthesisID)
					s.unpromoted(context.WithoutCancel(ctx), e)
				} else if _, err := s.unpromote(ctx, e); err != nil {
					// The put may have happened: the entry recorded above
					// removes it later.
					s.log.ErrorContext(ctx, "promotion of unknown outcome not removed; the janitor retries", "synthesis_id", e.SynthesisID, "error", err)
				}
				promoted = nil
			} else {
				ttl = pttl
				persistent, apiVersion = true, r.GetApiVersion()
			}
		} else {
			refused = map[string]any{"reason": "persistence-not-authorized", "explanation": "persistent:true needs " + s.opts.Propose.PersistScope + " (core §7.5.5); the endpoint is session-scoped"}
		}
	}
	if !persistent && p.requestedDuration > 0 && p.requestedDuration < ttl {
		ttl = p.requestedDuration
	}
	session := ev.sessionID
	if persistent {
		session = ""
	}
	c := s.newContract(pat, ev.caller.GetAgentId(), session, originPropose, ep.JSON, now, ttl)
	c.rec.Persistent = persistent
	if promoted != nil {
		c.rec.SynthesisID = promoted.SynthesisID
	}
	// Active, with its acceptance event pending: not in force until the
	// event is audited (contract.unaudited).
	c.state, c.event, c.changedMs = stateActive, eventAccepted, now.UnixMilli()
	unpromote := func() {
		if promoted != nil {
			if _, err := s.unpromote(ctx, *promoted); err != nil {
				s.log.ErrorContext(ctx, "promotion of a contract taken back not removed; the janitor retries", "synthesis_id", promoted.SynthesisID, "error", err)
			}
		}
	}
	if _, err := s.create(ctx, c, false); err != nil {
		unpromote()
		if errors.Is(err, errContractLimit) {
			return rejected(negID, agtp.ReasonPolicyRefused, fmt.Sprintf("you hold %d live contracts, the most allowed; release one (SUSPEND synthesis_id) first", s.opts.Contracts.MaxPerAgent), nil), nil
		}
		return nil, grpcerr.Internal(err)
	}
	if promoted != nil {
		// The contract is stored: its end removes the endpoint now.
		if err := s.rdb.ZRem(ctx, rediskeys.RCNSUnpromoteQueue, promoted.member()).Err(); err != nil {
			s.log.WarnContext(ctx, "promotion guard not cleared; the janitor drops it", "synthesis_id", c.rec.SynthesisID, "error", err)
		}
	}
	if err := s.emit(ctx, &c.rec, eventAccepted, "", ev.caller.GetAgentId()); err != nil {
		// No unaudited contract: take it back.
		s.forget(context.WithoutCancel(ctx), &c.rec, true)
		unpromote()
		return nil, err
	}
	if err := s.clearEvent(context.WithoutCancel(ctx), c.rec.SynthesisID, eventAccepted); err != nil {
		s.log.WarnContext(ctx, "contract event flag not cleared; the contract is in force once presented again", "synthesis_id", c.rec.SynthesisID, "error", err)
	}
	c.event = ""
	s.keepRecipe(ctx, pat, c.rec.Recipe)

	r := c.rec
	body := map[string]any{
		"method":             r.Method,
		"path":               r.Path,
		"synthesis_id":       r.SynthesisID,
		"endpoint":           json.RawMessage(r.Endpoint),
		"recipe_lineage":     map[string]any{"recipe_name": r.RecipeName, "recipe_version": r.RecipeVersion},
		"expires_at":         rfc3339(r.ExpiresMs),
		"persistent":         persistent,
		"granted_duration":   formatDuration(ttl),
		"contract_hash":      r.ContractHash,
		"negotiation_origin": r.Origin,
		"instantiated_endpoint": map[string]any{
			"method":         r.Method,
			"path":           r.Path,
			"semantic":       json.RawMessage(mustMarshal(ep.Def.Semantic)),
			"input":          json.RawMessage(ep.Def.InputSchema),
			"output":         json.RawMessage(ep.Def.OutputSchema),
			"errors":         ep.Def.Errors,
			"proposed":       true,
			"scope_required": nonNil(ep.Def.RequiredScopes),
			"expires":        map[bool]string{true: "persistent", false: "session"}[persistent],
		},
	}
	if r.SessionID != "" {
		body["session_id"] = r.SessionID
	}
	if refused != nil {
		body["persistent_refused"] = refused
	}
	if apiVersion != "" {
		body["agtp_api_version"] = apiVersion
	}
	resp := answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_APPROVED, agtp.StatusProposalApproved, negID, body)
	resp.Contract = c.proto(s.now().UnixMilli())
	return resp, nil
}

// newContract builds a contract record for a pattern's recipe.
func (s *Server) newContract(pat *recipe.Pattern, agentID, session, origin string, endpointJSON []byte, now time.Time, ttl time.Duration) *contract {
	rc, _ := json.Marshal(pat.Recipe())
	r := record{
		SynthesisID:   newID(prefixSynthesis),
		AgentID:       agentID,
		SessionID:     session,
		RecipeName:    pat.RecipeName,
		RecipeVersion: pat.RecipeVersion,
		Origin:        origin,
		IssuedMs:      now.UnixMilli(),
		ExpiresMs:     now.Add(ttl).UnixMilli(),
		Endpoint:      endpointJSON,
		Recipe:        rc,
	}
	var head struct {
		Method string `json:"method"`
		Path   string `json:"path"`
	}
	_ = json.Unmarshal(endpointJSON, &head)
	r.Method, r.Path = head.Method, head.Path
	r.ContractHash = contractHash(endpointJSON, r.RecipeName, r.RecipeVersion)
	return &contract{rec: r}
}

// contractHash is the SHA-256 of the canonical contract, the endpoint plus
// its lineage (AGTP-API §10.1.3), in RFC 8785 form, as 64 lowercase hex.
func contractHash(endpointJSON []byte, name, version string) string {
	b, err := jcs.Marshal(map[string]any{
		"endpoint":       json.RawMessage(endpointJSON),
		"recipe_lineage": map[string]any{"recipe_name": name, "recipe_version": version},
	})
	if err != nil {
		b = endpointJSON
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keepRecipe stores the captured recipe version once, so GetRecipe can
// serve it after the pattern changes.
func (s *Server) keepRecipe(ctx context.Context, pat *recipe.Pattern, recipeJSON []byte) {
	if err := s.rdb.SetNX(ctx, rediskeys.RCNSRecipe(pat.RecipeName, pat.RecipeVersion), recipeJSON, 0).Err(); err != nil {
		s.log.WarnContext(ctx, "captured recipe not kept", "recipe", pat.RecipeName, "version", pat.RecipeVersion, "error", err)
	}
}

// refusedOutright reports a PutEndpoint error that says the catalog did
// not register the endpoint; any other error (a timeout, an outage) leaves
// the outcome unknown.
func refusedOutright(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists, codes.PermissionDenied,
		codes.ResourceExhausted, codes.Unauthenticated, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
