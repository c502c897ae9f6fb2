package agp

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

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
// endpoint (refusal).
func (c *call) refuse(e *apiError) {
	c.write(c.refusal(e))
}

// refusal runs such an error through the pipeline: the caller is
// identified, spends its rate limits (a 429 answers instead once they are
// spent) and the response is signed and chained (the server's chain when
// the caller is not authenticated).
func (c *call) refusal(e *apiError) *pipeline.BoundOutcome {
	req := c.request(c.method, c.path, nil)
	return c.h.o.Pipeline.ServeBound(c.r.Context(), &pipeline.Bound{
		Request: req,
		Conn:    c.conn(),
		Refusal: &pipeline.Refusal{Status: e.Status, Reason: strings.ToLower(strings.ReplaceAll(e.Code, "_", "-")), Explanation: e.Message},
		Shape: func(_ context.Context, v *pipeline.View, resp *agtp.Response) *agtp.Response {
			if v.Rejection != strings.ToLower(strings.ReplaceAll(e.Code, "_", "-")) {
				// The pipeline refused first (e.g. the key's agent is
				// not active) or instead (its rate limit is spent); a
				// transaction's refusal still names the transaction.
				pe := fromAGTP(resp)
				if id, ok := e.Details["transactionId"]; ok {
					pe.Details["transactionId"] = id
				}
				return pe.response(c.rid)
			}
			return e.response(c.rid)
		},
	})
}

// shapeRefusal is the Shape of operations whose answer the binding writes
// itself: an answer already in AGP form passes; anything else is a
// refusal of the pipeline's, mapped to AGP's error model.
func (c *call) shapeRefusal(_ context.Context, _ *pipeline.View, resp *agtp.Response) *agtp.Response {
	if resp.Header.Get(agtp.HeaderContentType) == ContentType {
		return resp
	}
	return fromAGTP(resp).response(c.rid)
}

// request synthesizes the AGTP request of a call.
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
		if v := c.r.Header.Get(name); v != "" && len(v) <= 512 && agtp.PrintableASCII(v) {
			req.Header.Set(name, v)
		}
	}
	if len(body) > 0 {
		req.Body = body
		req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	}
	return req
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
