package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PROPOSE body forms (AGTP-API §10.4; core §7.2.7, §7.5.3;
// docs/decisions.md#D-propose-forms). Each is recognised by its marker
// member; a body with more than one is 400 ambiguous-body.
const (
	formWrapped   = "endpoint"  // AGTP-API §10.4.2, RECOMMENDED: parameters.endpoint
	formLegacy    = "legacy"    // AGTP-API: endpoint fields in parameters, next to name
	formProposal  = "proposal"  // core §7.5.3: parameters.proposal
	formSignature = "signature" // core §7.2.7: proposed_method, signature, intent
)

// endpointKeys are the members a proposer may set on the endpoint. The
// handler binding is always the server's (a composition of existing
// endpoints), so a proposed handler, anonymity, body limit or deprecation
// is dropped rather than honoured.
var endpointKeys = []string{"method", "path", "description", "namespace", "semantic", "input_schema", "output_schema", "errors", "required_scopes", "idempotency_key_required"}

// proposal is a parsed PROPOSE body.
type proposal struct {
	form string
	// def holds the proposed endpoint's members (empty for the §7.2.7
	// form until a pattern completes it).
	def map[string]any
	// §7.2.7 form.
	method          string
	intent          string
	signature       map[string]any
	contractVersion string

	persistent        bool
	requestedDuration time.Duration
	sessionID         string
	scopeRequested    []string
	dataClass         string
}

// badBody is a 400 answer to a malformed body.
type badBody struct {
	reason, explanation string
}

func (b *badBody) Error() string { return b.reason + ": " + b.explanation }

func bad(reason, format string, a ...any) *badBody {
	return &badBody{reason: reason, explanation: fmt.Sprintf(format, a...)}
}

func parseProposal(raw []byte) (*proposal, *badBody) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, bad("proposal-required", "PROPOSE needs a parameters object with endpoint, proposal or proposed_method")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, bad("invalid-body", "the PROPOSE parameters must be a JSON object")
	}
	if dec.More() {
		return nil, bad("invalid-body", "the PROPOSE parameters must be one JSON object")
	}
	var forms []string
	if _, ok := m["endpoint"]; ok {
		forms = append(forms, formWrapped)
	}
	_, hasName := m["name"]
	_, hasMethod := m["method"]
	_, hasPath := m["path"]
	if hasName || hasMethod || hasPath {
		forms = append(forms, formLegacy)
	}
	if _, ok := m["proposal"]; ok {
		forms = append(forms, formProposal)
	}
	if _, ok := m["proposed_method"]; ok {
		forms = append(forms, formSignature)
	}
	switch len(forms) {
	case 0:
		return nil, bad("proposal-required", "PROPOSE needs parameters.endpoint (AGTP-API §10.4), parameters.proposal (core §7.5.3) or parameters.proposed_method (core §7.2.7)")
	case 1:
	default:
		return nil, bad("ambiguous-body", "the parameters hold more than one PROPOSE form (%s); send exactly one", strings.Join(forms, ", "))
	}
	p := &proposal{form: forms[0]}
	var err *badBody
	if p.persistent, err = optBool(m, "persistent"); err != nil {
		return nil, err
	}
	if p.sessionID, err = optString(m, "session_id", 256); err != nil {
		return nil, err
	}
	if p.dataClass, err = optString(m, "data_class", 64); err != nil {
		return nil, err
	}
	if ctxObj, ok := m["context"].(map[string]any); ok && p.dataClass == "" {
		if p.dataClass, err = optString(ctxObj, "data_class", 64); err != nil {
			return nil, err
		}
	}
	d, err := optString(m, "requested_duration", 32)
	if err != nil {
		return nil, err
	}
	if d != "" {
		dur, ok := parseDuration(d)
		if !ok {
			return nil, bad("requested-duration-invalid", "requested_duration %q is not a duration such as 30m, 24h, 7d or PT1H", d)
		}
		p.requestedDuration = dur
	}
	if v, ok := m["scope_requested"]; ok {
		arr, isArr := v.([]any)
		if !isArr || len(arr) > 64 {
			return nil, bad("invalid-parameter", "scope_requested must be an array of at most 64 scope tokens")
		}
		for _, x := range arr {
			sc, isStr := x.(string)
			if !isStr {
				return nil, bad("invalid-parameter", "scope_requested must be an array of scope tokens")
			}
			p.scopeRequested = append(p.scopeRequested, sc)
		}
	}
	switch p.form {
	case formWrapped, formProposal:
		obj, ok := m[p.form].(map[string]any)
		if !ok {
			return nil, bad("invalid-parameter", "parameters.%s must be an endpoint definition object", p.form)
		}
		p.def = pick(obj)
		if p.dataClass == "" {
			if p.dataClass, err = optString(obj, "data_class", 64); err != nil {
				return nil, err
			}
		}
	case formLegacy:
		p.def = pick(m)
	case formSignature:
		if p.method, err = optString(m, "proposed_method", 32); err != nil {
			return nil, err
		}
		if p.intent, err = optString(m, "intent", 1024); err != nil {
			return nil, err
		}
		if p.contractVersion, err = optString(m, "contract_version", 32); err != nil {
			return nil, err
		}
		sig, ok := m["signature"].(map[string]any)
		if p.method == "" || p.intent == "" || !ok {
			return nil, bad("proposal-incomplete", "the core §7.2.7 form needs proposed_method, signature (an object) and intent")
		}
		if p.contractVersion != "" && !strings.HasPrefix(p.contractVersion, "AGTP-API/1.") {
			return nil, bad("contract-version-unsupported", "contract_version %q is not supported; this server speaks AGTP-API/1.0", p.contractVersion)
		}
		p.signature = sig
		p.def = map[string]any{"method": p.method}
		if path, _ := sig["path"].(string); path != "" {
			p.def["path"] = path
		} else if ctxObj, ok := m["context"].(map[string]any); ok {
			if path, _ := ctxObj["path"].(string); path != "" {
				p.def["path"] = path
			}
		}
	}
	return p, nil
}

func pick(src map[string]any) map[string]any {
	out := make(map[string]any, len(endpointKeys))
	for _, k := range endpointKeys {
		if v, ok := src[k]; ok {
			out[k] = v
		}
	}
	return out
}

func optBool(m map[string]any, name string) (bool, *badBody) {
	v, ok := m[name]
	if !ok || v == nil {
		return false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, bad("invalid-parameter", "%s must be a boolean", name)
	}
	return b, nil
}

func optString(m map[string]any, name string, maxLen int) (string, *badBody) {
	v, ok := m[name]
	if !ok || v == nil {
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr || len(s) > maxLen {
		return "", bad("invalid-parameter", "%s must be a string of at most %d bytes", name, maxLen)
	}
	return s, nil
}

var isoDuration = regexp.MustCompile(`^P(?:(\d{1,4})D)?(?:T(?:(\d{1,6})H)?(?:(\d{1,8})M)?(?:(\d{1,9})S)?)?$`)

// parseDuration reads requested_duration: Go's form (90m, 1h30m), days
// (7d, core's example) or ISO 8601 (PT1H, P7D). It must be positive.
func parseDuration(s string) (time.Duration, bool) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 || days > 3650 {
			return 0, false
		}
		return time.Duration(days) * 24 * time.Hour, true
	}
	if m := isoDuration.FindStringSubmatch(strings.ToUpper(s)); m != nil && s != "P" && !strings.HasSuffix(strings.ToUpper(s), "T") {
		var d time.Duration
		for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
			if m[i+1] != "" {
				n, _ := strconv.Atoi(m[i+1])
				d += time.Duration(n) * unit
			}
		}
		return d, d > 0
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}

// formatDuration renders a granted duration in the form requests use.
func formatDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}
