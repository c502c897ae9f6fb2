package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// The suite-level rules of the Tier 2 methods whose security notes bind
// every endpoint of the method (standard methods §5.2, §5.4, §5.6, §8.8,
// §10). The method scopes (authorization:grant, activation:run,
// payments:purchase) are added to each endpoint's required_scopes when the
// catalog compiles it (catalogsvc/endpoint MethodScopes), so policysvc
// refuses them like any endpoint scope.

// Reasons of the Tier 2 refusals.
const (
	ReasonFreeFormExecution      = "free-form-execution-refused"
	ReasonIdempotencyKeyMismatch = "idempotency-key-mismatch"
	ReasonGrantScopeInvalid      = "authority-scope-invalid"
)

// maxFreeFormDepth bounds the walk over a RUN body; JSON nesting is
// already bounded by the body size limit.
const maxFreeFormDepth = 64

// refuseFreeForm answers a RUN request that carries a free-form execution
// string (a member named command, script, shell, exec, cmd or code, at
// any depth of the body, or in the query) with 422, before the input is
// validated, so the reason is specific even where the schema would have
// refused the member anyway (standard methods §8.8 "under any
// circumstances").
func refuseFreeForm(x *exchange, ep *endpoint.Endpoint, query url.Values, body map[string]any) *agtp.Response {
	if ep.Def.Method != "RUN" {
		return nil
	}
	member := ""
	for k := range query {
		if endpoint.IsFreeFormMember(k) {
			member = k
			break
		}
	}
	if member == "" {
		member = freeFormMember(body, 0)
	}
	if member == "" {
		return nil
	}
	return x.fail(agtp.StatusUnprocessable, ReasonFreeFormExecution,
		"RUN executes registered procedures only; a free-form execution string ("+member+") is never accepted (standard methods §8.8, §10.3)",
		map[string]any{"member": member})
}

// freeFormMember returns the first free-form member name found in v.
func freeFormMember(v any, depth int) string {
	if depth > maxFreeFormDepth {
		return ""
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if endpoint.IsFreeFormMember(k) {
				return k
			}
			if m := freeFormMember(e, depth+1); m != "" {
				return m
			}
		}
	case []any:
		for _, e := range t {
			if m := freeFormMember(e, depth+1); m != "" {
				return m
			}
		}
	}
	return ""
}

// requestKey is the request's Idempotency-Key. A REGISTER may carry it as
// its idempotency_key parameter instead (standard methods §5.2); a header
// and a different parameter are a 400, as they name two requests.
func requestKey(x *exchange, method string, input []byte) (key string, present bool, resp *agtp.Response) {
	key, present = x.req.Header.Lookup(agtp.HeaderIdempotencyKey)
	if method != "REGISTER" {
		return key, present, nil
	}
	var in struct {
		Key *string `json:"idempotency_key"`
	}
	if json.Unmarshal(input, &in) != nil || in.Key == nil || *in.Key == "" {
		return key, present, nil
	}
	switch {
	case key == "":
		return *in.Key, true, nil
	case key != *in.Key:
		return "", false, x.fail(agtp.StatusBadRequest, ReasonIdempotencyKeyMismatch,
			"the Idempotency-Key header and the idempotency_key parameter differ; send one key, or the same key in both", nil)
	}
	return key, present, nil
}

// checkGrant applies AUTHORIZE's anti-laundering rule (standard methods
// §5.4, §10.2; core §10.4.2 for DELEGATE): every scope of the requested
// grant must be covered by the caller's effective Authority-Scope. A
// refusal is logged, and its Attribution-Record is signed onto the
// caller's chain like every response's.
func (p *Pipeline) checkGrant(x *exchange, method string, input []byte) *agtp.Response {
	if method != "AUTHORIZE" {
		return nil
	}
	var in struct {
		Scope json.RawMessage `json:"scope"`
	}
	_ = json.Unmarshal(input, &in)
	granted, ok := grantScopes(in.Scope)
	if !ok {
		return x.fail(agtp.StatusBadRequest, ReasonGrantScopeInvalid,
			"scope must be a non-empty list of scope tokens: a JSON array, or one string with the tokens separated by commas", nil)
	}
	own, err := agtp.ParseScopeList(p.effectiveScopes(x))
	if err != nil {
		own = nil
	}
	if bad, ok := own.CoversAll(granted); !ok {
		p.Log.WarnContext(x.ctx, "authorization refused: scope escalation", "agent_id", x.agentID, "path", x.req.Path, "scope", granted.String())
		return x.fail(agtp.StatusAuthorizationRequired, agtp.ReasonScopeRequired,
			"the granted scope "+string(bad)+" is not within the authorizing agent's own Authority-Scope (standard methods §10.2)",
			map[string]any{"scope": string(bad)})
	}
	return nil
}

// grantScopes parses AUTHORIZE's scope parameter: an array of tokens or
// one Authority-Scope-style string.
func grantScopes(raw json.RawMessage) (agtp.ScopeSet, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		set, err := agtp.ParseScopes(s)
		return set, err == nil
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return nil, false
	}
	set, err := agtp.ParseScopeList(list)
	return set, err == nil
}

// maxRecordedPrincipal and maxRecordedRunInput bound what a record copies
// from a request; beyond them the record carries the SHA-256 instead, so
// it still commits to the value.
const (
	maxRecordedPrincipal = 1024
	maxRecordedRunInput  = 16 << 10
)

// tier2Record fills the Tier 2 members of an Attribution-Record from the
// validated input: TRANSFER's from_principal and to_principal (standard
// methods §10.6), RUN's procedure and input parameters (§10.3), and the
// original task a RETRY or its re-run names (§8.5, retry.go).
func tier2Record(x *exchange, payload *attribution.Payload) {
	retryRecord(x, payload)
	if x.input == nil {
		return
	}
	switch x.inputMethod {
	case "TRANSFER":
		var in struct {
			From string `json:"from_principal"`
			To   string `json:"to_principal"`
		}
		if json.Unmarshal(x.input, &in) == nil {
			payload.FromPrincipal, payload.ToPrincipal = recorded(in.From), recorded(in.To)
		}
	case "RUN":
		payload.ProcedureID = x.req.Path
		var in map[string]any
		if json.Unmarshal(x.input, &in) != nil {
			return
		}
		redactSecrets(in, 0)
		b, err := json.Marshal(in)
		if err != nil {
			return
		}
		if c, err := jcs.Canonicalize(b); err == nil {
			b = c
		}
		if len(b) > maxRecordedRunInput {
			sum := sha256.Sum256(b)
			b, _ = json.Marshal(map[string]string{"sha256": hex.EncodeToString(sum[:])})
		}
		payload.RunInput = b
	}
}

func recorded(v string) string {
	if len(v) <= maxRecordedPrincipal {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// redactSecrets replaces credential-like members (the names a record must
// never carry, core §8.6) at any depth.
func redactSecrets(v any, depth int) {
	if depth > maxFreeFormDepth {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if attribution.IsSecretMember(k) {
				t[k] = "[redacted]"
				continue
			}
			redactSecrets(e, depth+1)
		}
	case []any:
		for _, e := range t {
			redactSecrets(e, depth+1)
		}
	}
}
