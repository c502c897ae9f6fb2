// Package agp serves the Agent Gateway Protocol (AGP 0.1, docs/agp.md) on
// the front door's HTTPS side, for agent platforms that speak only
// HTTP/JSON. Every AGP operation is translated into an AGTP request and run
// through the same pipeline (pipeline.ServeBound): structural decision,
// caller, input schema, policysvc Authorize (scopes, rate limits,
// idempotency), handler, and auditsvc SignAndAppend. So an HTTP-only
// agent and an AGTP agent reach the same endpoints under the same policy,
// and every AGP response is signed and chained to the caller's Agent-ID.
// API keys, confirmation tokens and transaction records live in
// policysvc's AgpService. docs/agp.md has the design.
package agp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/kit"
)

// Header names of AGP.
const (
	HeaderRequestID         = "X-Request-Id"
	HeaderConfirmationToken = "X-Confirmation-Token"
	HeaderIdempotencyKey    = "Idempotency-Key"
)

// Key scopes (AGP §4.5); "*" grants all.
const (
	ScopeDiscover = "discover"
	ScopeQuery    = "query"
	ScopeExecute  = "execute"
	ScopeAdmin    = "admin"
)

// methodQuote is the AGTP method prepare runs as (Tier 2 QUOTE: a call
// described, nothing run).
const methodQuote = "QUOTE"

// idempotencyPrefix keeps AGP's Idempotency-Key space apart from the
// same agent's AGTP keys: a replay must come back in the protocol it was
// stored in.
const idempotencyPrefix = "agp:"

// maxIdempotencyKey leaves room for the prefix within AGTP's 255.
const maxIdempotencyKey = 255 - len(idempotencyPrefix)

// Options configure the AGP binding.
type Options struct {
	// ServerID is reported as each business's server.
	ServerID string
	// Version is reported by GET /health.
	Version string
	// Pipeline runs the operations.
	Pipeline *pipeline.Pipeline
	// Catalog is the front door's catalog snapshot.
	Catalog *catalogstate.Store
	// Keys is policysvc's AgpService.
	Keys agpv1.AgpServiceClient
	// KeyCacheTTL is how long a resolved API key is trusted without asking
	// policysvc again (default 10s; negative disables the cache). Keys are
	// cached only while WatchKeys runs and its stream is live; a change
	// evicts them at once, so this is only a safety net.
	KeyCacheTTL time.Duration
	// MaxBody bounds a request body (default 1 MiB).
	MaxBody int64
	Log     *slog.Logger
}

// Handler serves AGP.
type Handler struct {
	o    Options
	keys *keyCache
}

// KeyCacheStats counts the API keys answered from the key cache (hits)
// and those looked up at policysvc (misses).
func (h *Handler) KeyCacheStats() *kit.CacheStats { return &h.keys.stats }

// New builds the handler.
func New(o Options) *Handler {
	if o.KeyCacheTTL == 0 {
		o.KeyCacheTTL = 10 * time.Second
	}
	if o.MaxBody <= 0 {
		o.MaxBody = agtp.DefaultMaxBody
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Version == "" {
		o.Version = "0.1"
	}
	return &Handler{o: o, keys: &keyCache{ttl: o.KeyCacheTTL, max: 10000}}
}

// Register adds AGP's routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /agp/discover", h.discover)
	mux.HandleFunc("POST /agp/query", func(w http.ResponseWriter, r *http.Request) { h.operate(w, r, OpQuery) })
	mux.HandleFunc("POST /agp/execute/prepare", h.prepare)
	mux.HandleFunc("POST /agp/execute", func(w http.ResponseWriter, r *http.Request) { h.operate(w, r, OpExecute) })
	mux.HandleFunc("GET /agp/status/{id}", h.status)
	mux.HandleFunc("GET /agp/businesses", h.directory)
	mux.HandleFunc("GET /health", h.health)
	mux.HandleFunc("POST /keys", h.createKey)
	mux.HandleFunc("GET /keys", h.listKeys)
	mux.HandleFunc("GET /keys/me", h.keyMe)
	mux.HandleFunc("DELETE /keys/{id}", h.revokeKey)
}

// call is one AGP request on its way through the pipeline.
type call struct {
	h   *Handler
	w   http.ResponseWriter
	r   *http.Request
	rid string
	// method and path are the AGTP request line used when the call is
	// refused before it names an endpoint.
	method, path string
	key          *agpv1.ApiKey
}

func (h *Handler) begin(w http.ResponseWriter, r *http.Request, method string) *call {
	c := &call{h: h, w: w, r: r, rid: requestID(r), method: method, path: "/"}
	if p := r.URL.EscapedPath(); validTarget(p) {
		c.path = p
	}
	w.Header().Set(HeaderRequestID, c.rid)
	return c
}

func validTarget(p string) bool {
	_, err := agtp.NewRequest("QUERY", p)
	return err == nil && !strings.Contains(p, "?")
}

// requestID echoes a client's X-Request-Id when it is a sane token
// (AGP §5.3 and its reference implementation), else mints a UUID.
func requestID(r *http.Request) string {
	if v := r.Header.Get(HeaderRequestID); v != "" && len(v) <= 128 {
		ok := true
		for i := 0; i < len(v); i++ {
			c := v[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
				ok = false
				break
			}
		}
		if ok {
			return v
		}
	}
	return uuid.NewString()
}

// authenticate resolves the key and checks scope; on failure it answers
// (through the pipeline, so the refusal is audited) and returns false.
func (c *call) authenticate(scope string) bool {
	a := c.h.authenticate(c.r.Context(), c.r)
	if a.err != nil {
		c.refuse(a.err)
		return false
	}
	c.key = a.key
	if scope != "" && !hasScope(c.key, scope) {
		c.refuse(&apiError{Status: http.StatusForbidden, Code: CodeForbidden, Error: "Forbidden", Message: "Missing required scope: " + scope})
		return false
	}
	return true
}

// refuse answers with an error the binding decided before naming an
// endpoint. It still goes through the pipeline: the caller is identified
// and the response signed and chained (the server's chain when the
// caller is not authenticated).
func (c *call) refuse(e *apiError) *pipeline.BoundOutcome {
	req := c.request(c.method, c.path, nil)
	out := c.h.o.Pipeline.ServeBound(c.r.Context(), &pipeline.Bound{
		Request: req,
		Conn:    c.conn(),
		Refusal: &pipeline.Refusal{Status: e.Status, Reason: strings.ToLower(strings.ReplaceAll(e.Code, "_", "-")), Explanation: e.Message},
		Shape: func(_ context.Context, v *pipeline.View, resp *agtp.Response) *agtp.Response {
			if v.Rejection != strings.ToLower(strings.ReplaceAll(e.Code, "_", "-")) {
				// The pipeline refused first (e.g. the key's agent is
				// not active).
				return fromAGTP(resp).response(c.rid)
			}
			return e.response(c.rid)
		},
	})
	c.write(out)
	return out
}

// request synthesizes the AGTP request of a call.
// shapeRefusal is the Shape of operations whose answer the binding writes
// itself: an answer already in AGP form passes; anything else is a
// refusal of the pipeline's, mapped to AGP's error model.
func (c *call) shapeRefusal(_ context.Context, _ *pipeline.View, resp *agtp.Response) *agtp.Response {
	if resp.Header.Get(agtp.HeaderContentType) == ContentType {
		return resp
	}
	return fromAGTP(resp).response(c.rid)
}

func (c *call) request(method, target string, body []byte) *agtp.Request {
	req, err := agtp.NewRequest(method, target)
	if err != nil {
		req, _ = agtp.NewRequest(method, "/")
	}
	if c.key != nil {
		req.Header.Set(agtp.HeaderAgentID, c.key.GetAgentId())
	}
	req.Header.Set(agtp.HeaderRequestID, c.rid)
	for _, name := range [...]string{"traceparent", "tracestate"} {
		if v := c.r.Header.Get(name); v != "" && len(v) <= 512 && printableASCII(v) {
			req.Header.Set(name, v)
		}
	}
	if len(body) > 0 {
		req.Body = body
		req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	}
	return req
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// conn describes the HTTPS connection to the pipeline.
func (c *call) conn() *transport.ConnInfo {
	ci := &transport.ConnInfo{Transport: "https", TLS: c.r.TLS, Requests: 1}
	if ap, err := netip.ParseAddrPort(c.r.RemoteAddr); err == nil {
		ci.RemoteAddr = net.TCPAddrFromAddrPort(ap)
	}
	return ci
}

// write sends the pipeline's answer as the HTTP response.
func (c *call) write(out *pipeline.BoundOutcome) {
	resp := out.Response
	status, body := resp.Status, resp.Body
	if resp.Header.Get(agtp.HeaderContentType) != ContentType {
		// Not shaped: the pipeline replaced the answer after the binding
		// saw it (audit-unavailable).
		e := fromAGTP(resp)
		status, body = e.Status, e.body(c.rid)
	}
	hd := c.w.Header()
	for _, f := range resp.Header {
		switch strings.ToLower(f.Name) {
		case "content-type", "content-length", "request-id":
			continue
		}
		hd.Add(f.Name, f.Value)
	}
	hd.Set("Content-Type", ContentType)
	hd.Set("Cache-Control", "no-store")
	now := time.Now()
	if rl := out.RateLimit; rl != nil {
		hd.Set("X-RateLimit-Limit", strconv.FormatInt(rl.Limit, 10))
		hd.Set("X-RateLimit-Remaining", strconv.FormatInt(rl.Remaining, 10))
		hd.Set("X-RateLimit-Reset", strconv.FormatInt(now.Unix()+rl.ResetSeconds, 10))
	}
	if status == http.StatusTooManyRequests {
		var eb errorBody
		_ = json.Unmarshal(body, &eb)
		if eb.RetryAfter < 1 {
			eb.RetryAfter = 1
		}
		hd.Set("Retry-After", strconv.FormatInt(eb.RetryAfter, 10))
		hd.Set("X-RateLimit-Remaining", "0")
		hd.Set("X-RateLimit-Reset", strconv.FormatInt(now.Unix()+eb.RetryAfter, 10))
	}
	c.w.WriteHeader(status)
	_, _ = c.w.Write(body)
}

// writeDirect answers without the pipeline (GET /health, key management).
func (c *call) writeDirect(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, (&apiError{Status: 500, Code: CodeInternal, Message: "the response could not be encoded"}).body(c.rid)
	}
	c.w.Header().Set("Content-Type", ContentType)
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.WriteHeader(status)
	_, _ = c.w.Write(b)
}

func (c *call) writeError(e *apiError) {
	c.w.Header().Set("Content-Type", ContentType)
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.WriteHeader(e.Status)
	_, _ = c.w.Write(e.body(c.rid))
}

func validation(msg string, details map[string]any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: CodeValidation, Error: "Validation failed", Message: msg, Details: details}
}

// readObject reads a JSON object body with the allowed members.
func (c *call) readObject(allowed ...string) (map[string]any, *apiError) {
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			return nil, validation("The body must be application/json.", nil)
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, c.h.o.MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, validation(fmt.Sprintf("The body is larger than %d bytes.", c.h.o.MaxBody), nil)
		}
		return nil, validation("The body could not be read.", nil)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
		return nil, validation("The body must be one JSON object.", nil)
	}
	details := map[string]any{}
	for k := range m {
		if !contains(allowed, k) {
			details[k] = "unknown member"
		}
	}
	if len(details) > 0 {
		return nil, validation("The body has members AGP does not define.", details)
	}
	return m, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func businessID(m map[string]any) (string, *apiError) {
	id, ok := m["businessId"].(string)
	if !ok || id == "" || len(id) > 256 {
		return "", validation("businessId is required: a string of 1–256 bytes.", map[string]any{"businessId": "required string, 1–256 bytes"})
	}
	return id, nil
}

// target is the call a query, prepare or execute request names.
type target struct {
	Business string
	Method   string
	Path     string
	Params   map[string]any
	// Amount is amount_cents, else amount, of the request or its
	// parameters (AGP §8.4).
	Amount *float64
	// Canonical is the request as hashed for a confirmation token.
	Canonical map[string]any
}

// requestMembers are the members of an AGP request object: the AGTP call
// and the amount the strict policy reads. idempotencyKey is
// server-injected (AGP §9.1), so a client's value is dropped.
var requestMembers = []string{"method", "path", "parameters", "amount_cents", "amount", "idempotencyKey"}

// parseTarget reads {businessId, request} (AGP §6.2–§6.4).
func (c *call) parseTarget(defaultMethod string) (*target, *apiError) {
	m, e := c.readObject("businessId", "request")
	if e != nil {
		return nil, e
	}
	t := &target{}
	if t.Business, e = businessID(m); e != nil {
		return nil, e
	}
	req, ok := m["request"].(map[string]any)
	if !ok {
		return nil, validation("request is required: an object naming the capability to call.", map[string]any{"request": "required object"})
	}
	details := map[string]any{}
	for k := range req {
		if !contains(requestMembers, k) {
			details["request."+k] = "unknown member"
		}
	}
	delete(req, "idempotencyKey")
	t.Method = defaultMethod
	if v, present := req["method"]; present {
		s, ok := v.(string)
		if !ok || s == "" {
			details["request.method"] = "string"
		}
		t.Method = s
	}
	t.Path, _ = req["path"].(string)
	switch {
	case t.Path == "":
		details["request.path"] = "required string: the capability's path, e.g. /orders/ord-1001"
	case len(t.Path) > 2048 || !strings.HasPrefix(t.Path, "/") || strings.ContainsAny(t.Path, "?#") || !validTarget(t.Path):
		details["request.path"] = "an absolute path without query, at most 2048 bytes; put inputs in request.parameters"
	}
	t.Params = map[string]any{}
	if v, present := req["parameters"]; present {
		p, ok := v.(map[string]any)
		if !ok {
			details["request.parameters"] = "object"
		}
		t.Params = p
	}
	for _, src := range []map[string]any{req, t.Params} {
		if t.Amount != nil {
			break
		}
		for _, name := range [...]string{"amount_cents", "amount"} {
			v, present := src[name]
			if !present {
				continue
			}
			n, ok := v.(json.Number)
			f, err := n.Float64()
			if !ok || err != nil {
				details[name] = "number of cents"
				break
			}
			t.Amount = &f
			break
		}
	}
	if len(details) > 0 {
		return nil, validation("The request is not a valid AGP request.", details)
	}
	canon := map[string]any{"method": t.Method, "path": t.Path, "parameters": t.Params}
	for _, name := range [...]string{"amount_cents", "amount"} {
		if v, ok := req[name]; ok {
			canon[name] = v
		}
	}
	t.Canonical = canon
	return t, nil
}

// hash is the SHA-256 of the canonical request (RFC 8785), bound to the
// business: key order does not matter, every value does.
func (t *target) hash() (string, error) {
	b, err := jcs.Marshal(map[string]any{"businessId": t.Business, "request": t.Canonical})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// body is the AGTP request body of the call: a core §5.7 envelope, so
// parameter names can never be mistaken for envelope members.
func (t *target) body() []byte {
	if len(t.Params) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"parameters": t.Params})
	return b
}

// transaction is what an operation leaves behind (AGP §6.5).
type transaction struct {
	id, op, business string
	input            any
	created          time.Time
}

func (c *call) newTransaction(op, business string, input any) *transaction {
	return &transaction{id: uuid.NewString(), op: op, business: business, input: input, created: time.Now()}
}

// store writes the transaction record of a finished operation.
func (c *call) store(tx *transaction, out *pipeline.BoundOutcome) {
	if out.Replayed || out.AgentID == "" {
		return
	}
	in, _ := json.Marshal(tx.input)
	rec := &agpv1.Transaction{
		Id: tx.id, AgentId: out.AgentID, Operation: tx.op, BusinessId: tx.business,
		CreatedAt: timestamppb.New(tx.created), UpdatedAt: timestamppb.Now(),
		InputJson: in, AuditId: out.AuditID, ApiKeyId: c.key.GetId(),
	}
	resp := out.Response
	if succeeded(resp.Status) {
		rec.Status = "succeeded"
		var env operationEnvelope
		if json.Unmarshal(resp.Body, &env) == nil {
			rec.ResultJson = env.Data
		}
	} else {
		rec.Status = "failed"
		var eb errorBody
		if json.Unmarshal(resp.Body, &eb) == nil {
			rec.Error = eb.Error
			if eb.Message != "" {
				rec.Error = eb.Message
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), 3*time.Second)
	defer cancel()
	if _, err := c.h.o.Keys.PutTransaction(ctx, &agpv1.PutTransactionRequest{Transaction: rec}); err != nil {
		c.h.o.Log.ErrorContext(ctx, "agp transaction record not stored", "transaction_id", tx.id, "audit_id", out.AuditID, "error", err)
	}
}

// shaper returns the Shape hook of an operation: a handler's result
// becomes AGP's transaction envelope, an AGTP error AGP's error body, and
// what the binding shaped itself passes through.
func (c *call) shaper(tx *transaction) func(context.Context, *pipeline.View, *agtp.Response) *agtp.Response {
	return func(_ context.Context, _ *pipeline.View, resp *agtp.Response) *agtp.Response {
		if resp.Header.Get(agtp.HeaderContentType) == ContentType {
			return resp
		}
		if succeeded(resp.Status) {
			data := resultOf(resp.Body)
			b, err := json.Marshal(operationEnvelope{TransactionID: tx.id, Status: "succeeded", Data: data})
			if err != nil {
				return (&apiError{Status: 500, Code: CodeInternal, Message: "the result could not be encoded"}).response(c.rid)
			}
			out := agtp.NewResponse(resp.Status, ContentType, b)
			return out
		}
		e := fromAGTP(resp)
		e.Details["transactionId"] = tx.id
		return e.response(c.rid)
	}
}

func (c *call) failTx(tx *transaction, e *apiError) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details["transactionId"] = tx.id
	out := c.refuse(e)
	c.store(tx, out)
}

// discover serves POST /agp/discover (AGP §6.1) as DISCOVER /methods: the
// business's capabilities are its endpoints.
func (h *Handler) discover(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodDiscover)
	if !c.authenticate(ScopeDiscover) {
		return
	}
	m, e := c.readObject("businessId")
	if e != nil {
		c.refuse(e)
		return
	}
	id, e := businessID(m)
	if e != nil {
		c.refuse(e)
		return
	}
	tx := c.newTransaction(OpDiscover, id, m)
	if findBusiness(h.o.Catalog.Current(), id) == nil {
		c.failTx(tx, businessNotFound(id))
		return
	}
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(agtp.MethodDiscover, "/methods", nil),
		Conn:    c.conn(),
		Intercept: func(_ context.Context, v *pipeline.View) *agtp.Response {
			b := findBusiness(v.State, id)
			if b == nil {
				e := businessNotFound(id)
				e.Details = map[string]any{"transactionId": tx.id}
				return e.response(c.rid)
			}
			body, err := json.Marshal(map[string]any{"transactionId": tx.id, "status": "succeeded", "data": b.discoverData(h.o.ServerID)})
			if err != nil {
				return (&apiError{Status: 500, Code: CodeInternal, Message: "the capabilities could not be encoded"}).response(c.rid)
			}
			return agtp.NewResponse(http.StatusOK, ContentType, body)
		},
		Shape: c.shaper(tx),
	})
	c.write(out)
	c.store(tx, out)
}

func businessNotFound(id string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: CodeBusinessNotFound, Error: "Business not found",
		Message: fmt.Sprintf("No business is registered with id %q; GET /agp/businesses lists them.", id)}
}

// operate serves POST /agp/query and POST /agp/execute (AGP §6.2, §6.4):
// the request's method and path are the AGTP call, its parameters the
// input, and the endpoint's handler runs.
func (h *Handler) operate(w http.ResponseWriter, r *http.Request, op string) {
	defMethod := agtp.MethodQuery
	if op == OpExecute {
		defMethod = agtp.MethodExecute
	}
	c := h.begin(w, r, defMethod)
	scope := ScopeQuery
	if op == OpExecute {
		scope = ScopeExecute
	}
	if !c.authenticate(scope) {
		return
	}
	t, e := c.parseTarget(defMethod)
	if e != nil {
		c.refuse(e)
		return
	}
	var idemKey string
	if op == OpExecute {
		if idemKey, e = idempotencyKey(r); e != nil {
			c.refuse(e)
			return
		}
	}
	hash, err := t.hash()
	if err != nil {
		c.refuse(validation("The request cannot be canonicalized: "+err.Error(), nil))
		return
	}
	tx := c.newTransaction(op, t.Business, map[string]any{"businessId": t.Business, "request": t.Canonical})
	if findBusiness(h.o.Catalog.Current(), t.Business) == nil {
		c.failTx(tx, businessNotFound(t.Business))
		return
	}
	req := c.request(t.Method, t.Path, t.body())
	if idemKey != "" {
		req.Header.Set(agtp.HeaderIdempotencyKey, idempotencyPrefix+idemKey)
	}
	token := strings.TrimSpace(r.Header.Get(HeaderConfirmationToken))
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: req,
		Conn:    c.conn(),
		Intercept: func(ctx context.Context, v *pipeline.View) *agtp.Response {
			if e := checkCapability(v.Endpoint, t, op); e != nil {
				e.Details["transactionId"] = tx.id
				return e.response(c.rid)
			}
			if op != OpExecute {
				return nil
			}
			// After policy and after an idempotent replay would have
			// answered: a retry carrying the token its first attempt
			// consumed gets the stored outcome, not a refusal.
			in := &agpv1.ConsumeConfirmationRequest{AgentId: v.AgentID, BusinessId: t.Business, RequestSha256: hash, Token: token}
			if t.Amount != nil {
				in.AmountPresent, in.AmountCents = true, *t.Amount
			}
			res, err := h.o.Keys.ConsumeConfirmation(ctx, in)
			if err != nil {
				h.o.Log.WarnContext(ctx, "agp confirmation check failed", "error", err)
				return (&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "The confirmation policy cannot be checked right now; retry shortly.",
					Details: map[string]any{"transactionId": tx.id}}).response(c.rid)
			}
			if !res.GetAllowed() {
				return (&apiError{Status: http.StatusForbidden, Code: codeOf(res.GetReason()), Error: res.GetMessage(), Message: res.GetMessage(),
					Details: map[string]any{"transactionId": tx.id, "policy": res.GetPolicy()}}).response(c.rid)
			}
			return nil
		},
		Shape: c.shaper(tx),
	})
	c.write(out)
	c.store(tx, out)
}

// checkCapability refuses a call to an endpoint of another business, or
// of the other operation (query runs side-effect-free endpoints only).
func checkCapability(ep *endpoint.Endpoint, t *target, op string) *apiError {
	if ep == nil || businessOf(ep) != t.Business {
		return &apiError{Status: http.StatusBadRequest, Code: CodeCapabilityNotFound, Error: "Capability not found",
			Message: fmt.Sprintf("Business %q has no capability %s %s; POST /agp/discover lists them.", t.Business, t.Method, t.Path), Details: map[string]any{}}
	}
	if got := operationOf(ep); got != op {
		return &apiError{Status: http.StatusBadRequest, Code: CodeWrongOperation, Error: "Wrong operation",
			Message: fmt.Sprintf("%s %s is reached through %s: call POST /agp/%s.", ep.Def.Method, ep.Def.Path, got, got),
			Details: map[string]any{"operation": got}}
	}
	return nil
}

// idempotencyKey reads Idempotency-Key (AGP §9): trimmed; empty means
// none, as in AGP; otherwise printable ASCII within AGTP's bound.
func idempotencyKey(r *http.Request) (string, *apiError) {
	k := strings.TrimSpace(r.Header.Get(HeaderIdempotencyKey))
	if k == "" {
		return "", nil
	}
	if len(k) > maxIdempotencyKey || !printableASCII(k) {
		return "", validation(fmt.Sprintf("Idempotency-Key must be 1–%d printable ASCII characters.", maxIdempotencyKey), map[string]any{"Idempotency-Key": "invalid"})
	}
	return k, nil
}

// prepare serves POST /agp/execute/prepare (AGP §6.3, §8) as QUOTE of the
// execute it confirms: the call is resolved and its input validated, and
// nothing runs.
func (h *Handler) prepare(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, methodQuote)
	if !c.authenticate(ScopeExecute) {
		return
	}
	t, e := c.parseTarget(agtp.MethodExecute)
	if e != nil {
		c.refuse(e)
		return
	}
	hash, err := t.hash()
	if err != nil {
		c.refuse(validation("The request cannot be canonicalized: "+err.Error(), nil))
		return
	}
	if findBusiness(h.o.Catalog.Current(), t.Business) == nil {
		c.refuse(businessNotFound(t.Business))
		return
	}
	quote, _ := json.Marshal(map[string]any{"method": t.Method, "path": t.Path, "parameters": t.Params})
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(methodQuote, "/", quote),
		Conn:    c.conn(),
		Intercept: func(ctx context.Context, v *pipeline.View) *agtp.Response {
			ep, refusal := v.Target(t.Method, t.Path, t.Params)
			if refusal != nil {
				return fromAGTP(refusal).response(c.rid)
			}
			if e := checkCapability(ep, t, OpExecute); e != nil {
				return e.response(c.rid)
			}
			res, err := h.o.Keys.IssueConfirmation(ctx, &agpv1.IssueConfirmationRequest{AgentId: v.AgentID, BusinessId: t.Business, RequestSha256: hash})
			if err != nil {
				h.o.Log.WarnContext(ctx, "agp confirmation not issued", "error", err)
				return (&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "A confirmation token cannot be issued right now; retry shortly."}).response(c.rid)
			}
			summary := fmt.Sprintf("Execute request for business '%s': %s %s", t.Business, t.Method, t.Path)
			if t.Amount != nil {
				summary += fmt.Sprintf(" (requested amount: %s cents)", strconv.FormatFloat(*t.Amount, 'f', -1, 64))
			}
			b, _ := json.Marshal(map[string]any{
				"confirmationToken": res.GetToken(),
				"expiresAt":         res.GetExpiresAt().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"),
				"summary":           summary,
				"policy":            res.GetPolicy(),
			})
			return agtp.NewResponse(http.StatusOK, ContentType, b)
		},
		Shape: c.shapeRefusal,
	})
	c.write(out)
}

// status serves GET /agp/status/{id} (AGP §6.5) as QUERY /tasks/{id}: the
// transaction record, found only under the caller's own Agent-ID.
func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodQuery)
	if !c.authenticate("") {
		return
	}
	id := r.PathValue("id")
	notFound := &apiError{Status: http.StatusNotFound, Code: CodeTransactionUnknown, Error: "Transaction not found", Message: "No transaction exists for the provided ID."}
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		c.refuse(notFound)
		return
	}
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(agtp.MethodQuery, "/tasks/"+url.PathEscape(id), nil),
		Conn:    c.conn(),
		Intercept: func(ctx context.Context, v *pipeline.View) *agtp.Response {
			res, err := h.o.Keys.GetTransaction(ctx, &agpv1.GetTransactionRequest{AgentId: v.AgentID, TransactionId: id})
			if status.Code(err) == codes.NotFound {
				return notFound.response(c.rid)
			}
			if err != nil {
				h.o.Log.WarnContext(ctx, "agp transaction lookup failed", "error", err)
				return (&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "Transactions cannot be read right now; retry shortly."}).response(c.rid)
			}
			b, _ := json.Marshal(transactionView(res.GetTransaction()))
			return agtp.NewResponse(http.StatusOK, ContentType, b)
		},
		Shape: c.shapeRefusal,
	})
	c.write(out)
}

// transactionView is AGP §6.5's stored-record shape.
func transactionView(t *agpv1.Transaction) map[string]any {
	raw := func(b []byte) any {
		if len(b) == 0 {
			return nil
		}
		return json.RawMessage(b)
	}
	var errv any
	if t.GetError() != "" {
		errv = t.GetError()
	}
	return map[string]any{
		"id": t.GetId(), "operation": t.GetOperation(), "businessId": t.GetBusinessId(), "status": t.GetStatus(),
		"createdAt": t.GetCreatedAt().AsTime().UTC().Format(time.RFC3339Nano), "updatedAt": t.GetUpdatedAt().AsTime().UTC().Format(time.RFC3339Nano),
		"input": raw(t.GetInputJson()), "result": raw(t.GetResultJson()), "error": errv, "auditId": t.GetAuditId(),
	}
}

// directory serves GET /agp/businesses (AGP §7.1), public, as an
// anonymous DISCOVER /methods.
func (h *Handler) directory(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodDiscover)
	q := r.URL.Query()
	filter := func(name string) string {
		v := strings.TrimSpace(q.Get(name))
		if len(v) > 128 {
			v = v[:128]
		}
		return strings.ToLower(v)
	}
	category, platform, text := filter("category"), filter("platform"), filter("q")
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(agtp.MethodDiscover, "/methods", nil),
		Conn:    c.conn(),
		Intercept: func(_ context.Context, v *pipeline.View) *agtp.Response {
			list := []directoryEntry{}
			for _, b := range businesses(v.State) {
				e := b.entry()
				if !b.active() ||
					category != "" && strings.ToLower(e.Category) != category ||
					platform != "" && strings.ToLower(e.Platform) != platform ||
					text != "" && !strings.Contains(strings.ToLower(e.Name), text) {
					continue
				}
				list = append(list, e)
			}
			b, _ := json.Marshal(map[string]any{"businesses": list})
			return agtp.NewResponse(http.StatusOK, ContentType, b)
		},
		Shape: c.shapeRefusal,
	})
	c.write(out)
}

// health serves GET /health (AGP §17.1): liveness, no authentication, no
// audit record (a probe must not grow the server's chain).
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodDiscover)
	c.writeDirect(http.StatusOK, map[string]any{
		"status": "ok", "version": h.o.Version, "environment": "agtp",
		"ready":     h.o.Catalog.Current() != nil,
		"timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
	})
}
