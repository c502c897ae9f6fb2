package agp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

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
	// Adapter holds a request in an adapter's shape (no method, path or
	// parameters): the business's endpoint declarations say which
	// endpoint it is for and what its input is (bind).
	Adapter map[string]any
}

// explicitMembers name the AGTP call; a request with none of them is in
// an adapter's shape.
var explicitMembers = []string{"method", "path", "parameters"}

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
	delete(req, "idempotencyKey")
	adapter := true
	for _, k := range explicitMembers {
		if _, present := req[k]; present {
			adapter = false
		}
	}
	details := map[string]any{}
	if adapter {
		t.Adapter, t.Canonical = req, req
		var bad string
		if t.Amount, bad = amountOf(req); bad != "" {
			return nil, validation("The request is not a valid AGP request.", map[string]any{bad: "number of cents"})
		}
		return t, nil
	}
	for k := range req {
		if !contains(requestMembers, k) {
			details["request."+k] = "unknown member"
		}
	}
	t.Method = defaultMethod
	if v, present := req["method"]; present {
		// The method becomes the AGTP request's, and from there the
		// Attribution-Record's: the wire's rule bounds it (AGTP-API §3.2).
		s, ok := v.(string)
		if !ok || !agtp.ValidMethodToken(s) {
			details["request.method"] = "an AGTP method: 3 to 32 capital letters, e.g. QUERY"
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
		a, bad := amountOf(src)
		if bad != "" {
			details[bad] = "number of cents"
		}
		if t.Amount = a; a != nil || bad != "" {
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

// amountOf reads amount_cents, else amount (AGP §8.4); bad names the
// member when it is not a number.
func amountOf(m map[string]any) (amount *float64, bad string) {
	for _, name := range [...]string{"amount_cents", "amount"} {
		v, present := m[name]
		if !present {
			continue
		}
		n, ok := v.(json.Number)
		f, err := n.Float64()
		if !ok || err != nil {
			return nil, name
		}
		return &f, ""
	}
	return nil, ""
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
	if len(k) > maxIdempotencyKey || !agtp.PrintableASCII(k) {
		return "", validation(fmt.Sprintf("Idempotency-Key must be 1–%d printable ASCII characters.", maxIdempotencyKey), map[string]any{"Idempotency-Key": "invalid"})
	}
	return k, nil
}
