package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Delivery modes of the RCNS gate (AGTP-API §10.1.3).
const (
	ModeConfirmFirst = "confirm-first"
	ModeOptimistic   = "optimistic"
)

// Stale-contract sweep modes (AGTP-API §10.1.4.1; core §7.2.16.2).
const (
	PolicyGrandfather = "grandfather"
	PolicyInvalidate  = "invalidate"
)

// Options configure rcnssvc. DefaultOptions returns working values; the
// zero value is not valid.
type Options struct {
	// RCNS is the implicit synthesis gate, [policies.rcns] (AGTP-API
	// §10.1.7). Its rate limit (rate_limit_per_minute) is policysvc's
	// named limit "rcns", so there is one definition of rate limiting.
	RCNS RCNSOptions `json:"rcns"`
	// Propose configures explicit negotiation (PROPOSE). Whether PROPOSE
	// is served at all is the manifest's policies.synthesis_enabled, read
	// from the catalog snapshot, so the wire and the behaviour agree.
	Propose ProposeOptions `json:"propose"`
	// Contracts bound the contract store.
	Contracts ContractOptions `json:"contracts"`
	// Attempts bound the failed-attempt records.
	Attempts AttemptOptions `json:"attempts"`

	// PatternsFile is a patterns file (rcnssvc/recipe format), polled every
	// ReloadInterval; "" uses Patterns.
	PatternsFile string `json:"patterns_file,omitempty"`
	// Patterns are used when PatternsFile is empty (e.g. demo.Patterns()).
	Patterns []*recipe.Pattern `json:"-"`
	// ReloadInterval is the patterns file poll; 0 disables.
	ReloadInterval time.Duration `json:"reload_interval"`

	// InspectAllScope is the operator scope that sees and revokes every
	// contract and runs the stale sweep (core §7.2.16.1-2).
	InspectAllScope string `json:"inspect_all_scope"`
	// PeerTimeout bounds each call to catalogsvc, policysvc and auditsvc.
	PeerTimeout time.Duration `json:"peer_timeout"`
}

// RCNSOptions are the four-lock gate's knobs (AGTP-API §10.1.7).
type RCNSOptions struct {
	// Enabled is lock 1; off by default.
	Enabled bool `json:"enabled"`
	// Mode is confirm-first (461 preview) or optimistic (run at once).
	Mode string `json:"mode"`
	// MinTrustTier is lock 4: the least trusted tier admitted. Tier 1 is
	// the most trusted, so a caller passes when its tier is at most this.
	MinTrustTier int32 `json:"min_trust_tier"`
	// ContractTTL is contract_ttl_seconds: the lifetime of a gate
	// contract, counted from the preview.
	ContractTTL time.Duration `json:"contract_ttl"`
	// OnPolicyChange is the default stale-sweep mode.
	OnPolicyChange string `json:"on_policy_change"`
	// NegotiateScope is lock 3's scope.
	NegotiateScope string `json:"negotiate_scope"`
	// RateLimitScope is the policysvc named limit gate evaluations spend
	// from, per Agent-ID; "" disables (tests only).
	RateLimitScope string `json:"rate_limit_scope"`
}

// ProposeOptions configure PROPOSE (core §7.2.7, §7.5; AGTP-API §10.4).
type ProposeOptions struct {
	// SessionTTL is the lifetime of a session-scoped synthesis, and the
	// most a requested_duration can get.
	SessionTTL time.Duration `json:"session_ttl"`
	// PersistScope grants persistent:true (core §7.5.5: persistence needs
	// higher authorization). Operators (Caller.operator) hold it.
	PersistScope string `json:"persist_scope"`
	// PersistentTTL is the lifetime of a promoted contract; its catalog
	// endpoint is removed when it expires or is revoked.
	PersistentTTL time.Duration `json:"persistent_ttl"`
	// MaxTurns is the turns one Negotiation-ID allows (core §7.4.1).
	MaxTurns int `json:"max_turns"`
	// NegotiationTTL is how long a Negotiation-ID's turn count is kept.
	NegotiationTTL time.Duration `json:"negotiation_ttl"`
	// AsyncAfter is how long PROPOSE waits for its evaluation before
	// answering 261 with a proposal_id; 0 never answers 261.
	AsyncAfter time.Duration `json:"async_after"`
	// EvaluationTimeout bounds one evaluation, synchronous or not.
	EvaluationTimeout time.Duration `json:"evaluation_timeout"`
	// ProposalTTL is how long a 261 proposal's result can be polled.
	ProposalTTL time.Duration `json:"proposal_ttl"`
	// MaxBodyBytes bounds the PROPOSE parameters object.
	MaxBodyBytes int `json:"max_body_bytes"`
	// RateLimitScope is the policysvc named limit PROPOSE evaluations
	// spend from, per Agent-ID (a bucket apart from the gate's); ""
	// disables.
	RateLimitScope string `json:"rate_limit_scope"`
}

// ContractOptions bound the contract store.
type ContractOptions struct {
	// MaxPerAgent is the most live contracts one agent holds.
	MaxPerAgent int `json:"max_per_agent"`
	// TombstoneRetention keeps an expired, revoked or released contract
	// after its end so a presentation answers 464 contract-revoked, not
	// 404 (AGTP-API §10.1.4).
	TombstoneRetention time.Duration `json:"tombstone_retention"`
	// JanitorInterval is the expiry sweep period; 0 disables.
	JanitorInterval time.Duration `json:"janitor_interval"`
	// ListLimit caps one listing.
	ListLimit int `json:"list_limit"`
}

// AttemptOptions bound the failed-attempt records (core §7.2.4: a bounded
// ring buffer).
type AttemptOptions struct {
	TTL time.Duration `json:"ttl"`
	// Max is the ring's size across the deployment.
	Max int `json:"max"`
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		RCNS: RCNSOptions{
			Mode:           ModeConfirmFirst,
			MinTrustTier:   1,
			ContractTTL:    time.Hour,
			OnPolicyChange: PolicyGrandfather,
			NegotiateScope: "rcns:negotiate",
			RateLimitScope: "rcns",
		},
		Propose: ProposeOptions{
			SessionTTL:        time.Hour,
			PersistScope:      "rcns:persist",
			PersistentTTL:     30 * 24 * time.Hour,
			MaxTurns:          3,
			NegotiationTTL:    time.Hour,
			AsyncAfter:        2 * time.Second,
			EvaluationTimeout: 30 * time.Second,
			ProposalTTL:       time.Hour,
			MaxBodyBytes:      256 << 10,
			RateLimitScope:    "rcns",
		},
		Contracts: ContractOptions{
			MaxPerAgent:        32,
			TombstoneRetention: 24 * time.Hour,
			JanitorInterval:    15 * time.Second,
			ListLimit:          1000,
		},
		Attempts:        AttemptOptions{TTL: time.Hour, Max: 10000},
		ReloadInterval:  2 * time.Second,
		InspectAllScope: "inspect:all",
		PeerTimeout:     5 * time.Second,
	}
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if o.RCNS.Mode != ModeConfirmFirst && o.RCNS.Mode != ModeOptimistic {
		bad("rcns.mode: %q is not confirm-first or optimistic", o.RCNS.Mode)
	}
	if o.RCNS.MinTrustTier < 1 || o.RCNS.MinTrustTier > 3 {
		bad("rcns.min_trust_tier: %d is not a trust tier (1-3)", o.RCNS.MinTrustTier)
	}
	if o.RCNS.ContractTTL <= 0 {
		bad("rcns.contract_ttl must be positive")
	}
	if o.RCNS.OnPolicyChange != PolicyGrandfather && o.RCNS.OnPolicyChange != PolicyInvalidate {
		bad("rcns.on_policy_change: %q is not grandfather or invalidate", o.RCNS.OnPolicyChange)
	}
	for name, sc := range map[string]string{"rcns.negotiate_scope": o.RCNS.NegotiateScope, "propose.persist_scope": o.Propose.PersistScope, "inspect_all_scope": o.InspectAllScope} {
		if _, err := agtp.ParseScope(sc); err != nil {
			bad("%s: %v", name, err)
		}
	}
	if o.Propose.SessionTTL <= 0 || o.Propose.PersistentTTL <= 0 {
		bad("propose.session_ttl and propose.persistent_ttl must be positive")
	}
	if o.Propose.MaxTurns < 1 {
		bad("propose.max_turns must be at least 1")
	}
	if o.Propose.NegotiationTTL <= 0 || o.Propose.ProposalTTL <= 0 {
		bad("propose.negotiation_ttl and propose.proposal_ttl must be positive")
	}
	if o.Propose.AsyncAfter < 0 {
		bad("propose.async_after must not be negative")
	}
	if o.Propose.EvaluationTimeout <= 0 || (o.Propose.AsyncAfter > 0 && o.Propose.EvaluationTimeout <= o.Propose.AsyncAfter) {
		bad("propose.evaluation_timeout must be positive and longer than async_after")
	}
	if o.Propose.MaxBodyBytes < 1024 || o.Propose.MaxBodyBytes > 16<<20 {
		bad("propose.max_body_bytes must be within 1 KiB-16 MiB")
	}
	if o.Contracts.MaxPerAgent < 1 || o.Contracts.MaxPerAgent > 10000 {
		bad("contracts.max_per_agent must be within 1-10000")
	}
	if o.Contracts.TombstoneRetention <= 0 {
		bad("contracts.tombstone_retention must be positive")
	}
	if o.Contracts.JanitorInterval < 0 || o.ReloadInterval < 0 {
		bad("contracts.janitor_interval and reload_interval must not be negative")
	}
	if o.Contracts.ListLimit < 1 {
		bad("contracts.list_limit must be positive")
	}
	if o.Attempts.TTL <= 0 || o.Attempts.Max < 1 {
		bad("attempts.ttl and attempts.max must be positive")
	}
	if o.PeerTimeout <= 0 {
		bad("peer_timeout must be positive")
	}
	if o.PatternsFile == "" {
		for i, p := range o.Patterns {
			if p == nil {
				bad("patterns[%d] is nil", i)
			}
		}
	}
	return errors.Join(errs...)
}
