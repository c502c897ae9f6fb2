// Package server implements identityv1.IdentityServiceServer on top of the
// registry, the document builders and the watch hub.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/paging"
)

// ReasonFormatInvalid is a ?format= value other than those of core §6.1.7.
const ReasonFormatInvalid = "format-invalid"

// Reasons of a GetIdentityDocument that names methods: from a caller
// other than the front door, or a token that is not a method.
const (
	ReasonMethodsFrontDoorOnly = "methods-front-door-only"
	ReasonMethodInvalid        = "method-invalid"
)

// Server is the identity service.
type Server struct {
	identityv1.UnimplementedIdentityServiceServer

	reg    *registry.Registry
	binder *sessionbind.Binder
	hub    *hub
	log    *slog.Logger
	opts   Options
	signer identitydoc.Signer
	params identitydoc.Params

	nsMu    sync.Mutex
	nsGen   uint64
	nsAt    time.Time
	nsBytes []byte
}

// New returns the identity service. rdb holds the registry, audit signs
// lifecycle events (auditsvc's AppendLifecycleEvent). Run must be running
// for WatchAgents to deliver events.
func New(rdb redis.UniversalClient, log *slog.Logger, audit auditv1.AuditServiceClient, opts Options) (*Server, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("identity options: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	reg, err := registry.New(rdb, log, audit, opts.registryOptions())
	if err != nil {
		return nil, err
	}
	return &Server{
		reg:    reg,
		binder: sessionbind.New(rdb, opts.SessionTTL),
		hub:    newHub(rdb, log, opts.WatchBuffer),
		log:    log,
		opts:   opts,
		signer: identitydoc.Signer{Key: opts.SigningKey, Issuer: opts.ManifestIssuer, KeyID: opts.KeyID},
		params: identitydoc.Params{
			AGTPVersion:     opts.AGTPVersion,
			DocumentVersion: "1.0.0",
			IssuerURL:       opts.IssuerURL,
			Methods:         opts.Methods,
			TrustScore:      opts.TrustScore,
			OrgDomain:       opts.OrgDomain,
			GovernanceZone:  opts.GovernanceZone,
		},
	}, nil
}

// Register attaches the service to a gRPC server.
func (s *Server) Register(g grpc.ServiceRegistrar) { identityv1.RegisterIdentityServiceServer(g, s) }

// Run keeps the registry-event subscription that feeds WatchAgents until
// ctx ends.
func (s *Server) Run(ctx context.Context) error { return s.hub.run(ctx) }

// RegisterGenesis validates, verifies and registers a signed Genesis.
func (s *Server) RegisterGenesis(ctx context.Context, req *identityv1.RegisterGenesisRequest) (*identityv1.RegisterGenesisResponse, error) {
	a, err := s.reg.Register(ctx, registry.RegisterRequest{
		//lint:ignore SA1019 the first release's clients send the Genesis only as bytes
		GenesisJSON: jsondoc.PreferString(req.GetGenesis(), req.GetGenesisJson()), Name: req.GetName(), Activate: req.GetActivate(),
	})
	if err != nil {
		return nil, err
	}
	s.changed()
	return &identityv1.RegisterGenesisResponse{Agent: a.Record}, nil
}

// ResolveAgent resolves an agent by ID, label or URI, and binds the
// Session-ID when one is given.
func (s *Server) ResolveAgent(ctx context.Context, req *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
	a, err := s.reg.Resolve(ctx, req.GetAgentId(), req.GetName(), req.GetUri())
	if err != nil {
		return nil, err
	}
	if sid := req.GetSessionId(); sid != "" {
		// Binding a session to an agent's client key is the front door's
		// fact to state: it proved the key.
		if !fromFrontDoor(ctx) {
			return nil, grpcerr.PermissionDenied(access.ReasonNotPermitted, "only the front door binds sessions (session_id)")
		}
		fp := req.GetClientKeyFingerprint()
		if fp != "" && !agtp.IsCanonicalID(fp) {
			return nil, grpcerr.InvalidArgument(registry.ReasonParameterInvalid, "client_key_fingerprint must be 64 lowercase hex digits")
		}
		if err := s.binder.Bind(ctx, sid, a.Record.GetAgentId(), fp); err != nil {
			if code, reason, _, _ := grpcerr.Reason(err); reason == sessionbind.ReasonMismatch {
				s.log.WarnContext(ctx, "session binding mismatch", "agent_id", a.Record.GetAgentId(), "code", code)
			}
			return nil, err
		}
	}
	return &identityv1.ResolveAgentResponse{Agent: a.Record}, nil
}

// GetGenesis returns the Genesis byte for byte as registered.
func (s *Server) GetGenesis(ctx context.Context, req *identityv1.GetGenesisRequest) (*identityv1.GetGenesisResponse, error) {
	b, err := s.reg.GetGenesis(ctx, req.GetAgentId())
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Genesis
	return &identityv1.GetGenesisResponse{GenesisJson: b, Genesis: string(b)}, nil
}

// ListAgents lists agents. active_only applies the namespace rule: active
// agents, and never Tier 3 (experimental agents are not discoverable,
// core §6.1.9).
//
// Pages are ordered by Agent-ID; the position is the last one returned.
func (s *Server) ListAgents(ctx context.Context, req *identityv1.ListAgentsRequest) (*identityv1.ListAgentsResponse, error) {
	activeOnly := req.GetActiveOnly()
	page, err := agentPaging.Parse(req.GetPageSize(), req.GetPageToken(), strconv.FormatBool(activeOnly))
	if err != nil {
		return nil, err
	}
	agents, more, err := s.reg.ListPage(ctx, page.After, page.Size, func(a *registry.Agent) bool {
		return !activeOnly || (a.Record.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_ACTIVE && a.Record.GetTrustTier() != 3)
	})
	if err != nil {
		return nil, err
	}
	out := &identityv1.ListAgentsResponse{Agents: make([]*identityv1.AgentRecord, 0, len(agents))}
	for _, a := range agents {
		out.Agents = append(out.Agents, a.Record)
	}
	if more {
		out.NextPageToken = page.Next(agents[len(agents)-1].Record.GetAgentId())
	}
	return out, nil
}

// agentPaging is ListAgents' page sizes.
var agentPaging = paging.Spec{RPC: identityv1.IdentityService_ListAgents_FullMethodName, Default: 100, Max: 1000}

// TransitionLifecycle runs one lifecycle method.
func (s *Server) TransitionLifecycle(ctx context.Context, req *identityv1.TransitionLifecycleRequest) (*identityv1.TransitionLifecycleResponse, error) {
	var deadline time.Time
	if req.GetMigrationDeadline() != nil {
		if err := req.GetMigrationDeadline().CheckValid(); err != nil {
			return nil, grpcerr.InvalidArgument(registry.ReasonParameterInvalid, "migration_deadline is not a valid timestamp")
		}
		deadline = req.GetMigrationDeadline().AsTime()
	}
	tr := registry.TransitionRequest{
		AgentID:           req.GetAgentId(),
		Transition:        req.GetTransition(),
		Reason:            req.GetReason(),
		SuccessorAgentID:  req.GetSuccessorAgentId(),
		MigrationDeadline: deadline,
	}
	if err := callerFacts(ctx, &tr, req); err != nil {
		return nil, err
	}
	res, err := s.reg.Transition(ctx, tr)
	if err != nil {
		return nil, err
	}
	if !res.Noop {
		s.changed()
	}
	return &identityv1.TransitionLifecycleResponse{
		Status:         res.Status,
		PreviousStatus: res.PreviousStatus,
		EventType:      res.EventType,
		AuditId:        res.AuditID,
		Noop:           res.Noop,
		Agent:          res.Agent.Record,
	}, nil
}

// GetIdentityDocument returns a signed document about one agent in a
// format of core §6.1.7: manifest (default; indented), json (compact),
// certificate (the Genesis as registered, signed by its issuer) or
// status. It serves every registered state, since the document says the
// state; the front door applies callerpolicy.Target first for the
// 503/410 of resolution. A registered Genesis that was never activated
// has no documents yet (404).
func (s *Server) GetIdentityDocument(ctx context.Context, req *identityv1.GetIdentityDocumentRequest) (*identityv1.GetIdentityDocumentResponse, error) {
	format := req.GetFormat()
	switch format {
	case "", agtp.FormatManifest, agtp.FormatJSON, agtp.FormatCertificate, agtp.FormatStatus:
	default:
		return nil, grpcerr.InvalidArgument(ReasonFormatInvalid, "format must be manifest, json, certificate or status", "format", format)
	}
	params, err := s.documentParams(ctx, req.GetMethods())
	if err != nil {
		return nil, err
	}
	a, err := s.reg.Get(ctx, req.GetAgentId())
	if err != nil {
		return nil, err
	}
	if a.Record.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED {
		return nil, grpcerr.NotFound(registry.ReasonAgentNotActivated, "agent "+a.Record.GetAgentId()+" is registered but not activated")
	}
	if format == agtp.FormatCertificate {
		b, err := s.reg.GetGenesis(ctx, a.Record.GetAgentId())
		if err != nil {
			return nil, err
		}
		return identityDocument(identitydoc.MediaTypeAGTP, b), nil
	}
	// The Genesis is verified again on every load.
	g, err := s.reg.LoadGenesis(ctx, a.Record.GetAgentId())
	if err != nil {
		s.log.ErrorContext(ctx, "identity document not served: stored Genesis fails verification", "agent_id", a.Record.GetAgentId(), "err", err)
		return nil, err
	}
	view := identitydoc.Agent{
		Record: a.Record, Genesis: g, ActivatedAt: a.ActivatedAt, MigrationDeadline: a.Deadline,
		LastMethod: a.LastMethod, LastMethodAt: a.LastMethodAt,
	}
	if format == agtp.FormatStatus {
		b, err := s.signer.SignInline(identitydoc.Status(view, params, s.opts.Now()))
		if err != nil {
			s.log.ErrorContext(ctx, "status document not served: signing failed", "agent_id", a.Record.GetAgentId(), "err", err)
			return nil, grpcerr.Internal(err)
		}
		return identityDocument(identitydoc.MediaTypeAGTP, b), nil
	}
	doc, err := identitydoc.Identity(view, params)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	b, err := s.signer.SignInline(doc)
	if err != nil {
		// core §6.3.5: a document that fails verification is never served,
		// and the failure is logged.
		s.log.ErrorContext(ctx, "identity document not served: signing failed", "agent_id", a.Record.GetAgentId(), "err", err)
		return nil, grpcerr.Internal(err)
	}
	if format != agtp.FormatJSON {
		b = identitydoc.Indent(b)
	}
	return identityDocument(identitydoc.MediaTypeIdentity, b), nil
}

// identityDocument carries a signed document as the string and as the
// first release's bytes.
func identityDocument(contentType string, b []byte) *identityv1.GetIdentityDocumentResponse {
	//lint:ignore SA1019 the first release's field, filled for its clients beside Document
	return &identityv1.GetIdentityDocumentResponse{ContentType: contentType, DocumentJson: b, Document: string(b)}
}

// GetNamespaceDocument returns the signed namespace document, regenerated
// after any registry change this replica has heard of and at least every
// NamespaceMaxAge.
func (s *Server) GetNamespaceDocument(ctx context.Context, _ *identityv1.GetNamespaceDocumentRequest) (*identityv1.GetNamespaceDocumentResponse, error) {
	b, err := s.namespace(ctx)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Document
	return &identityv1.GetNamespaceDocumentResponse{ContentType: identitydoc.MediaTypeAGTP, DocumentJson: b, Document: string(b)}, nil
}

func (s *Server) namespace(ctx context.Context) ([]byte, error) {
	gen := s.hub.gen.Load()
	now := s.opts.Now()
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if s.nsBytes != nil && s.nsGen == gen && now.Sub(s.nsAt) < s.opts.NamespaceMaxAge && s.hubSubscribed() {
		return s.nsBytes, nil
	}
	agents, err := s.reg.List(ctx, true)
	if err != nil {
		return nil, err
	}
	views := make([]identitydoc.Agent, 0, len(agents))
	for _, a := range agents {
		if a.Record.GetTrustTier() == 3 {
			continue
		}
		views = append(views, identitydoc.Agent{Record: a.Record, ActivatedAt: a.ActivatedAt})
	}
	b, err := s.signer.SignNamespace(identitydoc.Namespace(views, s.params, now))
	if err != nil {
		s.log.ErrorContext(ctx, "namespace document not served: signing failed", "err", err)
		return nil, grpcerr.Internal(err)
	}
	s.nsGen, s.nsAt, s.nsBytes = gen, now, b
	return b, nil
}

// changed invalidates this replica's namespace document at once after a
// change it made; changes made elsewhere arrive through the hub.
func (s *Server) changed() { s.hub.gen.Add(1) }

// hubSubscribed reports whether change events are arriving; without them
// the namespace cache cannot know about changes and is not used.
func (s *Server) hubSubscribed() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.subscribed
}

// WatchAgents streams registry changes: first a resync (drop everything
// cached) once the replica's subscription is live, then one message per
// change carrying the record after it (no record and no resync: the agent
// is gone, e.g. a registration rolled back). A resync is sent again
// whenever events may have been missed.
func (s *Server) WatchAgents(_ *identityv1.WatchAgentsRequest, stream grpc.ServerStreamingServer[identityv1.WatchAgentsResponse]) error {
	w := s.hub.add()
	defer s.hub.remove(w)
	err := s.hub.serve(stream.Context(), w, stream.Send)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// fromFrontDoor reports whether the call comes from the front door, the
// one service that proves agents and may state facts about them.
// maxRequestMethods bounds the methods a front door names for a document.
const maxRequestMethods = 256

// documentParams are the document parameters for one request: the
// configured methods plus those the front door says it accepts for the
// agent, so the document's methods agree with the Supported-Methods that
// front door sends (docs/decisions.md#D-supported-methods).
func (s *Server) documentParams(ctx context.Context, methods []string) (identitydoc.Params, error) {
	p := s.params
	if len(methods) == 0 {
		return p, nil
	}
	if !fromFrontDoor(ctx) {
		return p, grpcerr.InvalidArgument(ReasonMethodsFrontDoorOnly, "only the front door names the methods it accepts for an agent")
	}
	if len(methods) > maxRequestMethods {
		return p, grpcerr.InvalidArgument(ReasonMethodInvalid, fmt.Sprintf("at most %d methods", maxRequestMethods))
	}
	p.Methods = slices.Clone(p.Methods)
	for _, m := range methods {
		if !agtp.ValidMethodToken(m) {
			return p, grpcerr.InvalidArgument(ReasonMethodInvalid, "method is not an AGTP method token", "method", m)
		}
		if !slices.Contains(p.Methods, m) {
			p.Methods = append(p.Methods, m)
		}
	}
	return p, nil
}

func fromFrontDoor(ctx context.Context) bool {
	id, _ := access.Caller(ctx)
	return id == access.FrontDoor
}

// callerFacts fills in who asks for a lifecycle transition from what the
// caller proved, never from what it wrote: the front door states the
// agent's key fingerprint and Agent-ID, which it verified on the AGTP
// connection; an operator is authorised by its own certificate, and the
// event names it as the actor. The actor an AGTP caller writes proves
// nothing (the Genesis issuer could write "operator/admin"): it is
// recorded as claimed_actor, never as actor.
func callerFacts(ctx context.Context, tr *registry.TransitionRequest, req *identityv1.TransitionLifecycleRequest) error {
	id, _ := access.Caller(ctx)
	switch {
	case fromFrontDoor(ctx):
		tr.ClaimedActor = req.GetActor()
		tr.ClientKeyFingerprint = req.GetClientKeyFingerprint()
		tr.CallerAgentID = req.GetCallerAgentId()
		return nil
	case id.Kind == access.Operator:
		if req.GetClientKeyFingerprint() != "" || req.GetCallerAgentId() != "" {
			return grpcerr.InvalidArgument(registry.ReasonParameterInvalid,
				"client_key_fingerprint and caller_agent_id are stated by the front door only; an operator is known by its certificate")
		}
		tr.Operator = id.String()
		// The console names the person it acts for; no other operator can.
		tr.Actor = access.Actor(ctx)
		return nil
	}
	return grpcerr.PermissionDenied(access.ReasonNotPermitted, id.String()+" may not transition an agent's lifecycle")
}
