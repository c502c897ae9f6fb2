package server

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/policysvc/internal/oauth"
	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/idempotency"
)

// Options is everything an operator can set about policy. The zero value is
// a working policy: Authority-Scope and idempotency as the drafts and
// docs/decisions.md (#D-scope-262, #D-idempotency-key) require, the RCNS
// negotiation limit at its default, and no other limit or gate.
type Options struct {
	// DisableAnonymousDiscovery refuses anonymous requests with 262
	// anonymous-discovery-disabled (core §5.6; AGTP-API anonymous_discovery).
	DisableAnonymousDiscovery bool               `json:"disable_anonymous_discovery,omitempty"`
	TrustTiers                TrustTierOptions   `json:"trust_tiers"`
	RateLimits                RateLimitOptions   `json:"rate_limits"`
	Idempotency               IdempotencyOptions `json:"idempotency"`
	OAuth                     oauth.Options      `json:"oauth"`
	Budget                    BudgetOptions      `json:"budget"`
	Zone                      ZoneOptions        `json:"zone"`
	Merchant                  MerchantOptions    `json:"merchant"`
	// DecisionReuse is how long the front door may answer a request
	// identical to an earlier one (every AuthorizeRequest field the same:
	// caller, its proof, scopes, method, path, headers policy reads) with
	// that one's ALLOW, when the decision read nothing but the request and
	// these options: no rate limit applied, no Idempotency-Key, no
	// credential, no task-run index (docs/policy.md, "Reused decisions").
	// Default 10s; at most 5m; negative turns reuse off, so that every
	// request is decided here.
	DecisionReuse time.Duration `json:"decision_reuse,omitempty"`
}

// TrustTierOptions set the least-trusted tier a caller may have (tier 1 is
// the most trusted, so a caller passes when its tier is at most the
// minimum). Anonymous requests are governed by the discovery policy
// instead; an identified caller of unknown tier does not pass a minimum.
type TrustTierOptions struct {
	// Minimum applies to every method; 0 means none.
	Minimum int32 `json:"minimum,omitempty"`
	// Methods override Minimum per AGTP method.
	Methods map[string]int32 `json:"methods,omitempty"`
}

// RateLimitOptions configure the limits (core §10.4.4, §10.6; AGTP-API
// §10.1.5). Every limit is a GCRA bucket in Redis shared by all replicas.
type RateLimitOptions struct {
	// Tiers are per-Agent-ID limits by tier name. A caller's tier is the
	// request's rate_tier if it names one here, else "trust-tier-N" for its
	// trust tier N if named here, else "default". Anonymous requests use
	// the "anonymous" tier, counted per client address.
	Tiers map[string]ratelimit.Rate `json:"tiers,omitempty"`
	// Endpoints are limits on matching endpoints.
	Endpoints []EndpointLimit `json:"endpoints,omitempty"`
	// PerIP limits every request per client address.
	PerIP ratelimit.Rate `json:"per_ip"`
	// PerPrincipal limits every request per resolved principal (the owner
	// the front door resolved, else the acting principal of a validated
	// credential).
	PerPrincipal ratelimit.Rate `json:"per_principal"`
	// Named are the limits CheckRateLimit spends from, by scope. "rcns"
	// (RCNS gate evaluations per agent) defaults to 10 per minute.
	Named map[string]ratelimit.Rate `json:"named,omitempty"`
}

// EndpointLimit limits the endpoints it matches.
type EndpointLimit struct {
	// Method is an AGTP method, or "" / "*" for any.
	Method string `json:"method,omitempty"`
	// Path is a path template as the catalog spells it, or "" for any.
	Path string         `json:"path,omitempty"`
	Rate ratelimit.Rate `json:"rate"`
	// PerAgent counts each Agent-ID (anonymous: each client address)
	// separately; otherwise the limit is shared by all callers.
	PerAgent bool `json:"per_agent,omitempty"`
}

func (e EndpointLimit) matches(method, path string) bool {
	return (e.Method == "" || e.Method == "*" || e.Method == method) && (e.Path == "" || e.Path == path)
}

// IdempotencyOptions configure the slot protocol
// (docs/decisions.md#D-idempotency-in-flight, #D-idempotency-replay).
type IdempotencyOptions struct {
	// TTL keeps a completed outcome. Default 24h.
	TTL time.Duration `json:"ttl,omitempty"`
	// Lease is how long a claim stays pending without a completion before
	// a duplicate may run; it must exceed the longest handler run. Default
	// 30s.
	Lease time.Duration `json:"lease,omitempty"`
	// MaxWait is how long a duplicate of an in-flight request waits for
	// its outcome before 409 idempotency-in-flight. Default 2s; negative
	// answers 409 at once.
	MaxWait time.Duration `json:"max_wait,omitempty"`
	// RequireForNonIdempotent refuses requests to non-idempotent endpoints
	// without an Idempotency-Key (400 idempotency-key-required), on top of
	// endpoints that require one themselves.
	RequireForNonIdempotent bool `json:"require_for_non_idempotent,omitempty"`
	// MaxResponseBytes bounds a stored response. Default 4 MiB.
	MaxResponseBytes int `json:"max_response_bytes,omitempty"`
	// UnknownLease is how long a claim whose outcome is unknown (the
	// request ran, or may have run, and nothing was stored) keeps refusing
	// retries with 409 idempotency-outcome-unknown unless an operator
	// resolves it first. Default the TTL: as long as a stored outcome would
	// have answered them.
	UnknownLease time.Duration `json:"unknown_lease,omitempty"`
}

// BudgetOptions enforce Budget-Limit (core §5.5.5, §11.7: 456). Budget-Limit
// is a reserved header, so it is only read when the operator sets this up.
type BudgetOptions struct {
	// Costs are what endpoints consume: a fixed cost, or an amount read
	// from each request's body (a PURCHASE's amount). A request whose
	// Budget-Limit is below the cost of its endpoint in some unit gets 456
	// budget-exceeded.
	Costs []EndpointCost `json:"costs,omitempty"`
	// RequiredOnMethods must carry a Budget-Limit (456 budget-limit-required).
	RequiredOnMethods []string `json:"required_on_methods,omitempty"`
}

// EndpointCost is the cost of the endpoints it matches: either Cost, or
// AmountField with one of CurrencyField and Unit.
type EndpointCost struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Cost is a fixed cost in Cost-Estimate syntax ("tokens=500, USD=0.10").
	Cost string `json:"cost,omitempty"`
	// AmountField names the request member that holds the amount the
	// request spends, as member names joined by dots ("amount",
	// "payment.amount"). The value is a decimal string or number in the
	// unit's format (money: at most two decimals).
	AmountField string `json:"amount_field,omitempty"`
	// CurrencyField names the member that holds the amount's currency
	// (USD, EUR or GBP).
	CurrencyField string `json:"currency_field,omitempty"`
	// Unit is the amount's unit when the request does not name one: a
	// registered budget unit (tokens, compute-seconds, calls, USD, EUR,
	// GBP).
	Unit string `json:"unit,omitempty"`
}

// fromBody reports whether the cost is read from each request.
func (c EndpointCost) fromBody() bool { return c.AmountField != "" }

// ZoneOptions enforce AGTP-Zone-ID (core §5.5.5: 457).
type ZoneOptions struct {
	// Zones this server belongs to, e.g. "zone:acme-internal". A request
	// naming any other zone gets 457 zone-violation. Empty turns the check
	// off.
	Zones []string `json:"zones,omitempty"`
	// Required refuses requests without AGTP-Zone-ID (457 zone-required).
	Required bool `json:"required,omitempty"`
}

// MerchantOptions hold this server's merchant identity for PURCHASE
// counterparty checks (core §9: 458).
type MerchantOptions struct {
	// Methods are checked. Default ["PURCHASE"].
	Methods []string `json:"methods,omitempty"`
	// MerchantID is this server's canonical merchant ID. With ManifestFile
	// it may be left out when the document has a string merchant_id.
	MerchantID string `json:"merchant_id,omitempty"`
	// ManifestFingerprint is the SHA-256 of the current Merchant Manifest
	// Document, 64 hex digits. Give it or ManifestFile, not both.
	ManifestFingerprint string `json:"manifest_fingerprint,omitempty"`
	// ManifestFile is the current Merchant Manifest Document, a JSON
	// object read at start (at most 1 MiB). Its fingerprint is the SHA-256
	// of its RFC 8785 canonical form, and the front door serves it at
	// DESCRIBE /merchant so agents can verify it before a PURCHASE.
	ManifestFile string `json:"manifest_file,omitempty"`
	// Status is the merchant's lifecycle state. Default "active"; any other
	// state refuses every checked request.
	Status string `json:"status,omitempty"`
}

// Default rates and bounds.
var defaultRCNSRate = ratelimit.Rate{Limit: 10, Period: time.Minute}

const (
	defaultMaxWait          = 2 * time.Second
	defaultMaxResponseBytes = 4 << 20
	maxWaitLimit            = 30 * time.Second
	defaultDecisionReuse    = 10 * time.Second
	maxDecisionReuse        = 5 * time.Minute
)

// WithDefaults returns o with every unset option at its default.
func (o Options) WithDefaults() Options {
	if o.Idempotency.TTL == 0 {
		o.Idempotency.TTL = idempotency.DefaultTTL
	}
	if o.Idempotency.Lease == 0 {
		o.Idempotency.Lease = idempotency.DefaultLease
	}
	if o.Idempotency.MaxWait == 0 {
		o.Idempotency.MaxWait = defaultMaxWait
	}
	if o.Idempotency.UnknownLease == 0 {
		o.Idempotency.UnknownLease = o.Idempotency.TTL
	}
	if o.Idempotency.MaxResponseBytes == 0 {
		o.Idempotency.MaxResponseBytes = defaultMaxResponseBytes
	}
	named := make(map[string]ratelimit.Rate, len(o.RateLimits.Named)+1)
	named["rcns"] = defaultRCNSRate
	for k, v := range o.RateLimits.Named {
		named[k] = v
	}
	o.RateLimits.Named = named
	if o.DecisionReuse == 0 {
		o.DecisionReuse = defaultDecisionReuse
	}
	if len(o.Merchant.Methods) == 0 {
		o.Merchant.Methods = []string{"PURCHASE"}
	}
	if o.Merchant.Status == "" {
		o.Merchant.Status = "active"
	}
	if o.OAuth.Enabled() {
		o.OAuth = o.OAuth.WithDefaults()
	}
	return o
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	rate := func(name string, r ratelimit.Rate) {
		if err := r.Validate(); err != nil {
			bad("rate_limits.%s: %w", name, err)
		}
	}
	tier := func(name string, t int32) {
		if t < 0 || t > 3 {
			bad("trust_tiers.%s: %d is not a trust tier (1-3, or 0 for none)", name, t)
		}
	}
	tier("minimum", o.TrustTiers.Minimum)
	for m, t := range o.TrustTiers.Methods {
		tier("methods."+m, t)
	}
	for name, r := range o.RateLimits.Tiers {
		rate("tiers."+name, r)
	}
	for i, e := range o.RateLimits.Endpoints {
		rate(fmt.Sprintf("endpoints[%d]", i), e.Rate)
	}
	rate("per_ip", o.RateLimits.PerIP)
	rate("per_principal", o.RateLimits.PerPrincipal)
	for name, r := range o.RateLimits.Named {
		rate("named."+name, r)
		if !r.Enabled() {
			bad("rate_limits.named.%s: a named limit must have a positive limit", name)
		}
	}
	id := o.Idempotency
	switch {
	case id.TTL < time.Second:
		bad("idempotency.ttl must be at least 1s")
	case id.Lease < 100*time.Millisecond:
		bad("idempotency.lease must be at least 100ms")
	case id.Lease > id.TTL:
		bad("idempotency.lease must not exceed idempotency.ttl")
	case id.MaxWait > maxWaitLimit:
		bad("idempotency.max_wait must be at most %v", maxWaitLimit)
	case id.UnknownLease < id.Lease:
		bad("idempotency.unknown_lease must not be shorter than idempotency.lease")
	case id.MaxResponseBytes < 1024:
		bad("idempotency.max_response_bytes must be at least 1024")
	}
	if o.DecisionReuse > maxDecisionReuse {
		bad("decision_reuse must be at most %v (negative turns reuse off)", maxDecisionReuse)
	}
	if err := o.OAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	for i, c := range o.Budget.Costs {
		if err := c.validate(); err != nil {
			bad("budget.costs[%d]: %w", i, err)
		}
	}
	m := o.Merchant
	switch {
	case m.ManifestFingerprint != "" && !isHex64(m.ManifestFingerprint):
		bad("merchant.manifest_fingerprint must be 64 hex digits")
	case m.ManifestFingerprint != "" && m.ManifestFile != "":
		bad("merchant: give manifest_fingerprint or manifest_file, not both")
	case m.MerchantID != "" && m.ManifestFingerprint == "" && m.ManifestFile == "":
		bad("merchant.merchant_id needs manifest_fingerprint or manifest_file")
	case m.ManifestFingerprint != "" && m.MerchantID == "":
		bad("merchant.manifest_fingerprint needs merchant_id")
	}
	return errors.Join(errs...)
}

// Bounds on a body-read cost's member path.
const (
	maxFieldPathLen  = 256
	maxFieldSegments = 8
)

func (c EndpointCost) validate() error {
	if !c.fromBody() {
		if c.CurrencyField != "" || c.Unit != "" {
			return errors.New("currency_field and unit go with amount_field")
		}
		_, err := agtp.ParseBudget(c.Cost)
		return err
	}
	if c.Cost != "" {
		return errors.New("give cost or amount_field, not both")
	}
	if err := validFieldPath(c.AmountField); err != nil {
		return fmt.Errorf("amount_field: %w", err)
	}
	switch {
	case (c.CurrencyField == "") == (c.Unit == ""):
		return errors.New("amount_field needs one of currency_field and unit")
	case c.CurrencyField != "":
		if err := validFieldPath(c.CurrencyField); err != nil {
			return fmt.Errorf("currency_field: %w", err)
		}
	default:
		// A fixed unit must be one the budget check compares.
		b, err := agtp.ParseBudget(c.Unit + "=0")
		if err != nil || !b[0].Known {
			return fmt.Errorf("unit %q is not a registered budget unit (tokens, compute-seconds, calls, USD, EUR, GBP)", c.Unit)
		}
	}
	return nil
}

// validFieldPath checks a dotted member path: 1-8 non-empty names, at
// most 256 characters.
func validFieldPath(p string) error {
	if len(p) > maxFieldPathLen {
		return fmt.Errorf("at most %d characters", maxFieldPathLen)
	}
	segs := strings.Split(p, ".")
	if len(segs) > maxFieldSegments {
		return fmt.Errorf("at most %d member names", maxFieldSegments)
	}
	for _, s := range segs {
		if s == "" {
			return fmt.Errorf("%q has an empty member name", p)
		}
	}
	return nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
