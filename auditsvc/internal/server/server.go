// Package server implements auditv1.AuditServiceServer: it signs
// Attribution-Records, lifecycle events and other signed records into their
// per-agent streams (internal/chain) and answers the reads behind INSPECT.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	"github.com/agtpsuite/agtp/auditsvc/internal/archive"
	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Options configure the server. Zero values take the defaults.
type Options struct {
	// ServerID is written as server_id when a caller's claims omit it.
	ServerID string
	// Keys sign new records (the active key) and verify stored ones (all
	// keys). Nil, or no active key, signs with alg none: development only.
	Keys *attribution.KeySet
	// MaxClaimsBytes bounds claims_json, and the encoded size of the typed
	// claims (default 64 KiB).
	MaxClaimsBytes int
	// MaxOutcomeBytes bounds an idempotent outcome's stored response
	// (default 2 MiB).
	MaxOutcomeBytes int
	// MaxOutcomeTTL bounds an idempotent outcome's TTL (default 7 days).
	MaxOutcomeTTL time.Duration
	// LifecycleDefaultLimit and LifecycleMaxLimit are the page sizes of
	// ListLifecycleEvents (defaults 50 and 500; larger limits are capped).
	LifecycleDefaultLimit int
	LifecycleMaxLimit     int
	// VerifyPageSize is how many records VerifyChain reads per round trip
	// (default 1000).
	VerifyPageSize int
	// Chain tunes the chain store.
	Chain chain.Options
	// Archive turns on the JSONL archive sink when Archive.Dir is set.
	Archive archive.Options
	// RefusalSummaryInterval is how often the anonymous refusals signed
	// unchained are summarised into the server chain (default 1 min).
	RefusalSummaryInterval time.Duration
	// AnonymousChains is how many shards of the server chain anonymous
	// records are spread over (default 8, at most 1000).
	AnonymousChains int
	// Retention is how long records stay in Redis (0, the default: keep
	// everything). Older records are moved to the archive, which must be
	// configured, and their chains continue from a signed checkpoint
	// (Retain, docs/audit.md).
	Retention time.Duration
	// RetentionInterval is how often the retention task runs (default
	// 5 min).
	RetentionInterval time.Duration
	// Now is the retention task's clock (default time.Now).
	Now func() time.Time
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.MaxClaimsBytes < 0 || o.MaxOutcomeBytes < 0 || o.MaxOutcomeTTL < 0 || o.LifecycleDefaultLimit < 0 ||
		o.LifecycleMaxLimit < 0 || o.VerifyPageSize < 0 || o.RefusalSummaryInterval < 0 || o.AnonymousChains < 0 ||
		o.Retention < 0 || o.RetentionInterval < 0 {
		errs = append(errs, errors.New("server: negative option"))
	}
	if o.AnonymousChains > 1000 {
		errs = append(errs, errors.New("server: AnonymousChains is at most 1000"))
	}
	if o.LifecycleDefaultLimit > 0 && o.LifecycleMaxLimit > 0 && o.LifecycleDefaultLimit > o.LifecycleMaxLimit {
		errs = append(errs, errors.New("server: LifecycleDefaultLimit exceeds LifecycleMaxLimit"))
	}
	if err := o.Chain.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Chain.OnAppend != nil {
		errs = append(errs, errors.New("server: Chain.OnAppend is set by the server (use Archive)"))
	}
	if o.Retention > 0 && !o.Archive.Enabled() {
		errs = append(errs, errors.New("server: Retention needs the archive (Archive.Dir), where records older than the retention go"))
	}
	if err := o.Archive.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.MaxClaimsBytes == 0 {
		o.MaxClaimsBytes = 64 << 10
	}
	if o.MaxOutcomeBytes == 0 {
		o.MaxOutcomeBytes = 2 << 20
	}
	if o.MaxOutcomeTTL == 0 {
		o.MaxOutcomeTTL = 7 * 24 * time.Hour
	}
	if o.LifecycleDefaultLimit == 0 {
		o.LifecycleDefaultLimit = 50
	}
	if o.LifecycleMaxLimit == 0 {
		o.LifecycleMaxLimit = 500
	}
	if o.VerifyPageSize == 0 {
		o.VerifyPageSize = 1000
	}
	if o.RefusalSummaryInterval == 0 {
		o.RefusalSummaryInterval = DefaultRefusalSummaryInterval
	}
	if o.AnonymousChains == 0 {
		o.AnonymousChains = 8
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = DefaultRetentionInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Server implements auditv1.AuditServiceServer.
type Server struct {
	auditv1.UnimplementedAuditServiceServer

	opts  Options
	log   *slog.Logger
	store *chain.Store
	sink  *archive.Sink
	// moved writes the records the retention task moves (nil: no
	// retention); retainMu serializes runs of the task.
	moved    *archive.Moved
	retainMu sync.Mutex
	keys     atomic.Pointer[attribution.KeySet]
	now      func() time.Time
	// refusals counts the anonymous refusals signed unchained since the
	// last summary; summary is the summary whose append has no known
	// outcome yet (nil: none), under summaryMu.
	refusals  refusalTally
	summaryMu sync.Mutex
	summary   *pendingSummary
	// anonymousSeq spreads anonymous records that name no request.
	anonymousSeq atomic.Uint64
}

var _ auditv1.AuditServiceServer = (*Server)(nil)

// New builds the server. rdb holds the chains (see docs/audit.md for the
// persistence settings it needs).
func New(rdb redis.UniversalClient, log *slog.Logger, opts Options) (*Server, error) {
	if rdb == nil {
		return nil, errors.New("server: nil redis client")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: log, now: time.Now}
	ks := opts.Keys
	if ks == nil {
		ks, _ = attribution.NewKeySet(nil)
	}
	if ks.ActiveKID() == "" {
		log.Warn("no Attribution-Record signing key configured: records are signed with alg none and are not authoritative (core §10.4.9)")
	}
	s.keys.Store(ks)
	copts := opts.Chain
	if opts.Archive.Enabled() {
		sink, err := archive.New(opts.Archive, log)
		if err != nil {
			return nil, err
		}
		s.sink = sink
		copts.OnAppend = sink.Offer
		if opts.Retention > 0 {
			if s.moved, err = archive.NewMoved(opts.Archive); err != nil {
				return nil, err
			}
		}
	}
	store, err := chain.New(rdb, ks.Signer(), log, copts)
	if err != nil {
		return nil, err
	}
	s.store = store
	return s, nil
}

// Run checks the Redis persistence settings (logging what could lose
// records) and runs background work (the archive sink, the refusal
// summaries, the retention task) until ctx is done. The sink stops last,
// on its own context, so that it still archives the summary appended on
// shutdown.
func (s *Server) Run(ctx context.Context) error {
	for _, w := range s.store.DurabilityWarnings(ctx) {
		s.log.WarnContext(ctx, "audit store durability: "+w)
	}
	sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSink()
	sunk := make(chan error, 1)
	if s.sink != nil {
		go func() { sunk <- s.sink.Run(sinkCtx) }()
	} else {
		sunk <- nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.summarizeRefusals(ctx) })
	wg.Go(func() { s.retain(ctx) })
	wg.Wait()
	stopSink()
	return <-sunk
}

// SetKeys rotates keys at run time: new records are signed with the new
// active key; stored records verify against every key in ks, so ks must
// keep the earlier public keys.
func (s *Server) SetKeys(ks *attribution.KeySet) {
	if ks == nil {
		return
	}
	s.keys.Store(ks)
	s.store.SetSigner(ks.Signer())
}

// Store exposes the chain store to recovery tools (index rebuild, scans).
func (s *Server) Store() *chain.Store { return s.store }

// JWKSHandler serves the public signing keys (RFC 7517) over HTTP(S), for
// relying parties that verify Attribution-Records.
func (s *Server) JWKSHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := s.keys.Load().JWKS()
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(body)
	})
}

// storeErr maps a chain store error to a status error.
func storeErr(ctx context.Context, err error, notFoundReason, notFoundText string) error {
	if cerr := grpcerr.FromContext(ctx.Err()); cerr != nil {
		return cerr
	}
	switch {
	case errors.Is(err, chain.ErrNotFound):
		return grpcerr.NotFound(notFoundReason, notFoundText)
	case errors.Is(err, chain.ErrInvalid):
		return grpcerr.InvalidArgument("audit-record-invalid", err.Error())
	case errors.Is(err, chain.ErrRequestReused):
		// Answering with the other record would attest a response that was
		// never given; appending would break the retry guarantee.
		return grpcerr.New(codes.AlreadyExists, "audit-request-id-reused",
			"request_id was already used for a record with other content; a retry must resend the same request")
	case errors.Is(err, chain.ErrContended), errors.Is(err, chain.ErrUnavailable):
		// The front door fails closed on this for state-changing methods.
		return grpcerr.Unavailable("audit-unavailable", "the audit store could not record the response")
	}
	return grpcerr.Internal(err)
}

// chainOf maps a request's Agent-ID to a chain name; the server chain is
// named by "" or by its own name.
func chainOf(agentID string) (string, error) {
	c := chain.ChainName(agentID)
	if !chain.ValidChainID(c) {
		return "", grpcerr.InvalidArgument("agent-id-invalid", "agent_id is not a valid Agent-ID")
	}
	return c, nil
}

// requireAgent is chainOf for reads, where the agent must be named.
func requireAgent(agentID string) (string, error) {
	if agentID == "" {
		return "", grpcerr.InvalidArgument("agent-id-required", "agent_id is required")
	}
	return chainOf(agentID)
}

// claims decodes the caller's payload members, from claims_json (raw) or
// the typed claims (typed) but not both, and checks them (checkClaims).
func (s *Server) claims(raw []byte, typed *auditv1.AttributionClaims) (attribution.Payload, error) {
	var p attribution.Payload
	if typed != nil {
		if len(raw) != 0 {
			return p, grpcerr.InvalidArgument("audit-claims-invalid", "set claims or claims_json, not both")
		}
		if n := proto.Size(typed); n > s.opts.MaxClaimsBytes {
			return p, grpcerr.InvalidArgument("audit-claims-too-large", fmt.Sprintf("claims exceeds %d bytes", s.opts.MaxClaimsBytes))
		}
		var err error
		if p, err = attributionpb.Payload(typed); err != nil {
			return p, grpcerr.InvalidArgument("audit-claims-invalid", "claims has an invalid member: "+err.Error())
		}
	} else {
		if len(raw) > s.opts.MaxClaimsBytes {
			return p, grpcerr.InvalidArgument("audit-claims-too-large", fmt.Sprintf("claims_json exceeds %d bytes", s.opts.MaxClaimsBytes))
		}
		if len(raw) == 0 {
			raw = []byte("{}")
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return p, grpcerr.InvalidArgument("audit-claims-invalid", "claims_json is not a JSON object with valid members: "+err.Error())
		}
	}
	if err := s.checkClaims(&p); err != nil {
		return p, err
	}
	return p, nil
}

// checkClaims checks a caller's payload members, whichever form carried
// them, and fills the members the service owns.
func (s *Server) checkClaims(p *attribution.Payload) error {
	if p.PreviousAuditID != "" {
		return grpcerr.InvalidArgument("audit-previous-id-set", "previous_audit_id is set by the audit service")
	}
	if p.AuditRecordVersion != "" && p.AuditRecordVersion != attribution.RecordVersion {
		return grpcerr.InvalidArgument("audit-record-version-unsupported", "audit_record_version must be \"1\"")
	}
	for _, h := range []struct{ name, v string }{{"request_hash", p.RequestHash}, {"result_hash", p.ResultHash}} {
		if h.v != "" && !attribution.IsAuditID(h.v) {
			return grpcerr.InvalidArgument("audit-claims-invalid", h.name+" must be 64 lowercase hex characters")
		}
	}
	if p.Timestamp == "" {
		p.Timestamp = s.now().UTC().Format(time.RFC3339Nano)
	} else if _, err := time.Parse(time.RFC3339Nano, p.Timestamp); err != nil {
		return grpcerr.InvalidArgument("audit-claims-invalid", "timestamp must be RFC 3339")
	}
	if p.ServerID == "" {
		p.ServerID = s.opts.ServerID
	}
	for k := range p.Extra {
		if attribution.IsCheckpointMember(k) {
			// A checkpoint is known by its typ; its member stays off
			// records too, so no signed record ever reads as one.
			return grpcerr.InvalidArgument("audit-claims-invalid", k+" is a chain checkpoint's member, not a record's")
		}
		if attribution.IsSecretMember(k) {
			// Core §8.6: no credential goes into a signed, replayable record.
			delete(p.Extra, k)
			s.log.Warn("credential-like member removed from an audit record", "member", k)
		}
	}
	return nil
}

// requestOf checks a request's request ID and fingerprints the request
// for chain.Store.AppendOnce: SHA-256 of its deterministic protobuf
// encoding, as received. A retry resends the same message, so it has the
// same fingerprint; members the service fills in (timestamp, server_id)
// are not in the message, so its clock moving between attempts cannot make
// a retry look like another request. The message, not the decoded
// payload, is hashed because that costs a fraction of a JSON encode per
// record, and it covers everything an append does with the request (the
// idempotent outcome, event_type) without listing it. No request ID: the
// zero Request, an append like any other.
func requestOf(id string, req proto.Message) (chain.Request, error) {
	if id == "" {
		return chain.Request{}, nil
	}
	if !chain.ValidRequestID(id) {
		return chain.Request{}, grpcerr.InvalidArgument("audit-request-id-invalid",
			fmt.Sprintf("request_id must be 1 to %d characters of A-Z a-z 0-9 . _ -", chain.MaxRequestID))
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return chain.Request{}, grpcerr.Internal(fmt.Errorf("encode request: %w", err))
	}
	sum := sha256.Sum256(b)
	return chain.Request{ID: id, Fingerprint: hex.EncodeToString(sum[:])}, nil
}

// SignAndAppend signs an Attribution-Record and appends it to its chain,
// storing the idempotent outcome in the same atomic step.
func (s *Server) SignAndAppend(ctx context.Context, req *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
	a, err := s.startAppend(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return a.wait(ctx)
}

// pendingAppend is a SignAndAppend on its way: the record in its chain's
// queue (chain.Batch), or an answer already known (resp, err).
type pendingAppend struct {
	s     *Server
	chain string
	p     chain.Pending
	resp  *auditv1.SignAndAppendResponse
}

// startAppend checks req and queues its record, or answers it (unchained
// records are signed, not stored). Without a batch it appends in the
// caller's goroutine when the chain is idle (a lone call); a batch request
// starts its items through one chain.Batch and waits for them together.
func (s *Server) startAppend(ctx context.Context, req *auditv1.SignAndAppendRequest, batch *chain.Batch) (*pendingAppend, error) {
	c, err := chainOf(req.GetChainAgentId())
	if err != nil {
		return nil, err
	}
	p, err := s.claims(req.GetClaimsJson(), req.GetClaims())
	if err != nil {
		return nil, err
	}
	if p.Status < 100 || p.Status > 999 {
		return nil, grpcerr.InvalidArgument("audit-claims-invalid", "status must be a three-digit AGTP status code")
	}
	if req.GetUnchained() {
		resp, err := s.signUnchained(c, req, p)
		if err != nil {
			return nil, err
		}
		return &pendingAppend{resp: resp}, nil
	}
	if c == rediskeys.ServerChain {
		c = s.anonymousChain(req.GetRequestId(), p.ResponseID)
	}
	// Unauthenticated traffic goes to the server chain, whatever Agent-ID
	// it claimed.
	if err := ownRecord(&p, c, "chain_agent_id"); err != nil {
		return nil, err
	}
	var outcome *chain.IdempotentOutcome
	if o := req.GetIdempotentOutcome(); o != nil {
		ttl := time.Duration(o.GetTtlSeconds()) * time.Second
		switch {
		case o.GetSlot() == "" || o.GetToken() == "":
			return nil, grpcerr.InvalidArgument("idempotent-outcome-invalid", "idempotent_outcome needs slot and token")
		case o.GetTtlSeconds() <= 0 || ttl > s.opts.MaxOutcomeTTL:
			return nil, grpcerr.InvalidArgument("idempotent-outcome-invalid", fmt.Sprintf("ttl_seconds must be in 1..%d", int64(s.opts.MaxOutcomeTTL/time.Second)))
		case len(o.GetResponse()) > s.opts.MaxOutcomeBytes:
			return nil, grpcerr.InvalidArgument("idempotent-outcome-too-large", fmt.Sprintf("response exceeds %d bytes", s.opts.MaxOutcomeBytes))
		}
		outcome = &chain.IdempotentOutcome{Slot: o.GetSlot(), Token: o.GetToken(), TTL: ttl, Response: o.GetResponse()}
	}
	r, err := requestOf(req.GetRequestId(), req)
	if err != nil {
		return nil, err
	}
	pa := &pendingAppend{s: s, chain: c}
	if batch == nil {
		a, err := s.store.AppendOnce(ctx, attribution.StreamAttribution, c, p, outcome, r)
		pa.resp, err = appendedResponse(a, err)
		if err != nil {
			return nil, s.appendErr(ctx, err, c)
		}
		return pa, nil
	}
	pa.p = batch.Start(ctx, attribution.StreamAttribution, c, p, outcome, r)
	return pa, nil
}

// wait returns the append's answer.
func (a *pendingAppend) wait(ctx context.Context) (*auditv1.SignAndAppendResponse, error) {
	if a.resp != nil {
		return a.resp, nil
	}
	resp, err := appendedResponse(a.p.Wait())
	if err != nil {
		return nil, a.s.appendErr(ctx, err, a.chain)
	}
	return resp, nil
}

func appendedResponse(a chain.Appended, err error) (*auditv1.SignAndAppendResponse, error) {
	if err != nil {
		return nil, err
	}
	return &auditv1.SignAndAppendResponse{AttributionRecord: a.JWS, AuditId: a.AuditID, PreviousAuditId: a.PreviousAuditID,
		Sequence: a.Sequence, OutcomeStored: a.OutcomeStored, Replayed: a.Replayed}, nil
}

func (s *Server) appendErr(ctx context.Context, err error, c string) error {
	if !errors.Is(err, chain.ErrInvalid) && !errors.Is(err, chain.ErrRequestReused) {
		s.log.ErrorContext(ctx, "audit append failed", "chain", c, "err", err)
	}
	return storeErr(ctx, err, "audit-record-not-found", "no such record")
}

// AppendLifecycleEvent signs a lifecycle event into the agent's lifecycle
// stream (hash-linked like the attribution chain).
func (s *Server) AppendLifecycleEvent(ctx context.Context, req *auditv1.AppendLifecycleEventRequest) (*auditv1.AppendLifecycleEventResponse, error) {
	c, err := requireAgent(req.GetAgentId())
	if err != nil {
		return nil, err
	}
	et := req.GetEventType()
	if !validEventType(et) {
		return nil, grpcerr.InvalidArgument("event-type-invalid", "event_type must be a lowercase token of at most 64 characters")
	}
	//lint:ignore SA1019 the first release's clients send the claims only as bytes
	p, err := s.claims(jsondoc.PreferString(req.GetClaims(), req.GetClaimsJson()), nil)
	if err != nil {
		return nil, err
	}
	if p.EventType != "" && p.EventType != et {
		return nil, grpcerr.InvalidArgument("event-type-invalid", "claims event_type differs from event_type")
	}
	if err := ownRecord(&p, c, "agent_id"); err != nil {
		return nil, err
	}
	p.EventType = et
	r, err := requestOf(req.GetRequestId(), req)
	if err != nil {
		return nil, err
	}
	a, err := s.store.AppendOnce(ctx, attribution.StreamLifecycle, c, p, nil, r)
	if err != nil {
		return nil, s.appendErr(ctx, err, c)
	}
	return &auditv1.AppendLifecycleEventResponse{Jws: a.JWS, AuditId: a.AuditID, PreviousAuditId: a.PreviousAuditID,
		Sequence: a.Sequence, Replayed: a.Replayed}, nil
}

// AppendSignedRecord signs a record into a named per-agent stream.
func (s *Server) AppendSignedRecord(ctx context.Context, req *auditv1.AppendSignedRecordRequest) (*auditv1.AppendSignedRecordResponse, error) {
	c, err := chainOf(req.GetAgentId())
	if err != nil {
		return nil, err
	}
	name := req.GetStream()
	if !chain.ValidStreamName(name) || name == attribution.StreamAttribution || name == attribution.StreamLifecycle {
		return nil, grpcerr.InvalidArgument("stream-invalid", "stream must be a lowercase token naming a signed-record stream (not attribution or lifecycle)")
	}
	//lint:ignore SA1019 the first release's clients send the claims only as bytes
	p, err := s.claims(jsondoc.PreferString(req.GetClaims(), req.GetClaimsJson()), nil)
	if err != nil {
		return nil, err
	}
	if err := ownRecord(&p, c, "agent_id"); err != nil {
		return nil, err
	}
	r, err := requestOf(req.GetRequestId(), req)
	if err != nil {
		return nil, err
	}
	a, err := s.store.AppendOnce(ctx, name, c, p, nil, r)
	if err != nil {
		return nil, s.appendErr(ctx, err, c)
	}
	return &auditv1.AppendSignedRecordResponse{Jws: a.JWS, AuditId: a.AuditID, PreviousAuditId: a.PreviousAuditID,
		Sequence: a.Sequence, Replayed: a.Replayed}, nil
}

// ownRecord makes p a record of the agent whose chain c is: an agent's
// streams hold only that agent's own records, so agent_id is filled in
// when the claims leave it out and refused when they name another agent
// (chainField is the request field that named the chain). Records on the
// server chain keep the agent_id they carry.
func ownRecord(p *attribution.Payload, c, chainField string) error {
	if rediskeys.IsServerChain(c) {
		return nil
	}
	if p.AgentID != "" && p.AgentID != c {
		return grpcerr.InvalidArgument("audit-chain-agent-mismatch", "claims agent_id differs from "+chainField)
	}
	p.AgentID = c
	return nil
}

func validEventType(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// externalChain is the chain_agent_id callers see: "" for the server
// chain and its shards (no agent).
func externalChain(c string) string {
	if rediskeys.IsServerChain(c) {
		return ""
	}
	return c
}

// anonymousChain spreads anonymous records over the server chain's shards,
// so that they are appended side by side instead of one after another. A
// retried request (same request ID, else same Response-ID) lands on the
// same shard, where the chain script finds it appended already.
func (s *Server) anonymousChain(requestID, responseID string) string {
	key := requestID
	if key == "" {
		key = responseID
	}
	if key == "" {
		return rediskeys.ServerChainShard(int(s.anonymousSeq.Add(1) % uint64(s.opts.AnonymousChains)))
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return rediskeys.ServerChainShard(int(h.Sum32() % uint32(s.opts.AnonymousChains)))
}

// GetRecord returns a stored record by Audit-ID (INSPECT target=audit).
func (s *Server) GetRecord(ctx context.Context, req *auditv1.GetRecordRequest) (*auditv1.GetRecordResponse, error) {
	id := req.GetAuditId()
	if !attribution.IsAuditID(id) {
		return nil, grpcerr.InvalidArgument("audit-id-invalid", "audit_id must be 64 lowercase hex characters")
	}
	e, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, storeErr(ctx, err, "audit-record-not-found", "no audit record has this Audit-ID")
	}
	rec, err := attribution.Parse(e.JWS)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("stored record %s does not parse: %w", id, err))
	}
	payload, err := jsondoc.Struct(rec.RawPayload)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("stored record %s: %w", id, err))
	}
	return &auditv1.GetRecordResponse{Record: &auditv1.Record{
		//lint:ignore SA1019 the first release's field, filled for its clients beside Payload
		AuditId: e.AuditID, Jws: e.JWS, PayloadJson: rec.RawPayload, Payload: payload, ChainAgentId: externalChain(e.Chain),
		Sequence: e.Sequence, StoredAt: timestamppb.New(e.StoredAt), Stream: e.Stream,
	}}, nil
}

// GetChainHead returns an agent's newest Audit-ID (INSPECT target=chain_head).
func (s *Server) GetChainHead(ctx context.Context, req *auditv1.GetChainHeadRequest) (*auditv1.GetChainHeadResponse, error) {
	c, err := requireAgent(req.GetAgentId())
	if err != nil {
		return nil, err
	}
	head, n, err := s.store.Head(ctx, attribution.StreamAttribution, c)
	if err != nil {
		return nil, storeErr(ctx, err, "chain-not-found", "no audit chain for this agent")
	}
	return &auditv1.GetChainHeadResponse{AuditId: head, Length: n}, nil
}

// ListLifecycleEvents returns an agent's lifecycle stream newest first, a
// page at a time (INSPECT target=lifecycle).
func (s *Server) ListLifecycleEvents(ctx context.Context, req *auditv1.ListLifecycleEventsRequest) (*auditv1.ListLifecycleEventsResponse, error) {
	c, err := requireAgent(req.GetAgentId())
	if err != nil {
		return nil, err
	}
	spec := paging.Spec{RPC: auditv1.AuditService_ListLifecycleEvents_FullMethodName, Default: s.opts.LifecycleDefaultLimit, Max: s.opts.LifecycleMaxLimit}
	size := req.GetPageSize()
	if size == 0 {
		//lint:ignore SA1019 the first release's name for page_size, still honoured
		size = req.GetLimit()
	}
	page, err := spec.Parse(size, req.GetPageToken(), c)
	if err != nil {
		return nil, err
	}
	// The position is the sequence of the last event returned: the next
	// page is the events before it in the stream.
	var before uint64
	if page.After != "" {
		n, err := strconv.ParseUint(page.After, 10, 64)
		if err != nil || n == 0 {
			return nil, grpcerr.InvalidArgument(paging.ReasonPageTokenInvalid, "page_token does not hold a lifecycle position")
		}
		before = n
	}
	limit := page.Size
	es, err := s.store.RangeNewest(ctx, attribution.StreamLifecycle, c, before, int64(limit))
	if err != nil {
		return nil, storeErr(ctx, err, "lifecycle-not-found", "no lifecycle stream for this agent")
	}
	out := &auditv1.ListLifecycleEventsResponse{Events: make([]*auditv1.LifecycleEvent, 0, len(es))}
	for _, e := range es {
		rec, err := attribution.Parse(e.JWS)
		if err != nil {
			return nil, grpcerr.Internal(fmt.Errorf("stored lifecycle event %s does not parse: %w", e.AuditID, err))
		}
		payload, err := jsondoc.Struct(rec.RawPayload)
		if err != nil {
			return nil, grpcerr.Internal(fmt.Errorf("stored lifecycle event %s: %w", e.AuditID, err))
		}
		out.Events = append(out.Events, &auditv1.LifecycleEvent{
			AuditId: e.AuditID, Format: "jws", Envelope: e.JWS, EventType: rec.Payload.EventType,
			//lint:ignore SA1019 the first release's field, filled for its clients beside Payload
			PayloadJson: rec.RawPayload, Payload: payload, Sequence: e.Sequence, StoredAt: timestamppb.New(e.StoredAt),
		})
	}
	if len(es) == limit && es[len(es)-1].Sequence > 1 {
		out.NextPageToken = page.Next(strconv.FormatUint(es[len(es)-1].Sequence, 10))
	}
	return out, nil
}

// VerifyChain checks a stored chain: every sequence, Audit-ID, link and
// signature, and the head. alg none records pass only while the server
// itself has no signing key.
func (s *Server) VerifyChain(ctx context.Context, req *auditv1.VerifyChainRequest) (*auditv1.VerifyChainResponse, error) {
	c, err := requireAgent(req.GetAgentId())
	if err != nil {
		return nil, err
	}
	stream := req.GetStream()
	if stream == "" {
		stream = attribution.StreamAttribution
	}
	if !chain.ValidStreamName(stream) {
		return nil, grpcerr.InvalidArgument("stream-invalid", "stream must be a lowercase token")
	}
	opts := s.chainOptions(stream, c)
	v, err := s.store.Verify(ctx, stream, c, opts, int64(s.opts.VerifyPageSize))
	if err != nil {
		return nil, storeErr(ctx, err, "chain-not-found", "no such chain")
	}
	resp := &auditv1.VerifyChainResponse{Valid: v.Valid, Length: v.Length}
	if b := v.Break; b != nil {
		resp.FirstInvalidAuditId = b.AuditID
		resp.Problem = b.Problem
		if b.Err != nil {
			resp.Problem += ": " + b.Err.Error()
		}
		s.log.ErrorContext(ctx, "audit chain verification failed", "stream", stream, "chain", c, "index", b.Index, "problem", resp.Problem)
	}
	return resp, nil
}

// chainOptions are the checks a stored chain of (stream, c) must pass.
func (s *Server) chainOptions(stream, c string) attribution.ChainOptions {
	ks := s.keys.Load()
	opts := attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: ks}}
	if ks.ActiveKID() == "" {
		opts.Algorithms = []string{attribution.AlgEdDSA, attribution.AlgNone}
	}
	// Every stream of an agent's chain holds only that agent's records
	// (ownRecord).
	if !rediskeys.IsServerChain(c) {
		opts.AgentID = c
	}
	return opts
}

// GetSigningKeys returns the JWKS of every current and earlier signing key.
func (s *Server) GetSigningKeys(context.Context, *auditv1.GetSigningKeysRequest) (*auditv1.GetSigningKeysResponse, error) {
	b, err := s.keys.Load().JWKS()
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	jwks, err := jsondoc.Struct(b)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("jwks: %w", err))
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Jwks
	return &auditv1.GetSigningKeysResponse{JwksJson: b, Jwks: jwks}, nil
}
