package server

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	"github.com/agtpsuite/agtp/identitysvc/sessionbind"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Options configure the identity service. The zero value of a field means
// its default (see WithDefaults).
type Options struct {
	// LifecycleAuth is "genesis_issuer" (default, core §7.2.19) or "open"
	// (development and single tenant only: any caller that reaches the
	// service may run every lifecycle method).
	LifecycleAuth string
	// OperatorFingerprints may run any lifecycle method in either mode:
	// SHA-256 of the raw Ed25519 key of their client certificates, hex.
	OperatorFingerprints []string

	// SigningKey is the suite's Ed25519 key; it signs identity, status and
	// namespace documents. Required.
	SigningKey ed25519.PrivateKey
	// KeyID names SigningKey in namespace signatures. Default
	// "ed25519:" + the first 16 hex digits of its fingerprint.
	KeyID string
	// ManifestIssuer is manifest_issuer. Default "agtp-suite".
	ManifestIssuer string
	// IssuerURL is the identity document's issuer. Default
	// "https://registrar.invalid" (configure it in production).
	IssuerURL string
	// AGTPVersion is agtp_version. Default "0.8.0".
	AGTPVersion string
	// Methods are methods the server accepts beyond the 18-method floor,
	// listed in every identity document.
	Methods []string
	// TrustScore is the trust_score served (AGTP-TRUST computes it
	// elsewhere). Default 0.5; must be in (0, 1].
	TrustScore float64
	// OrgDomain is the organisation's domain: it appears in the namespace
	// document, forms its manifest URIs, and is the one domain whose
	// Form 3/4 URIs resolve here. Empty accepts any domain.
	OrgDomain string
	// GovernanceZone appears in the namespace document.
	GovernanceZone string

	// SessionTTL is how long a Session-ID binding outlives its last use.
	// Default 24 h.
	SessionTTL time.Duration
	// LockTTL, LockWait, AuditTimeout and LabelReuseAfter: see
	// registry.Options. Defaults 30 s, 5 s, 5 s, 90 days.
	LockTTL         time.Duration
	LockWait        time.Duration
	AuditTimeout    time.Duration
	LabelReuseAfter time.Duration
	// NamespaceMaxAge is how long a generated namespace document is
	// reused when nothing changed; it must stay under the 300 s freshness
	// threshold of core §6.2.3. Default 60 s.
	NamespaceMaxAge time.Duration
	// AgentCA issues registrar-issued Agent Certificates
	// (IssueAgentCertificate). Nil: the RPC answers that this registrar
	// issues none.
	AgentCA *AgentCA
	// AgentCertMaxLifetime is the longest validity IssueAgentCertificate
	// grants. Default 24 h; at most agentcert.MaxLifetime.
	AgentCertMaxLifetime time.Duration

	// WatchBuffer is how many events a slow WatchAgents stream may fall
	// behind before it is sent a resync instead. Default 256.
	WatchBuffer int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults fills in defaults.
func (o Options) WithDefaults() Options {
	if o.ManifestIssuer == "" {
		o.ManifestIssuer = "agtp-suite"
	}
	if o.IssuerURL == "" {
		o.IssuerURL = "https://registrar.invalid"
	}
	if o.AGTPVersion == "" {
		o.AGTPVersion = agtp.DocumentVersion
	}
	if o.TrustScore == 0 {
		o.TrustScore = 0.5
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = sessionbind.DefaultTTL
	}
	if o.NamespaceMaxAge == 0 {
		o.NamespaceMaxAge = 60 * time.Second
	}
	if o.WatchBuffer == 0 {
		o.WatchBuffer = 256
	}
	if o.AgentCertMaxLifetime == 0 {
		o.AgentCertMaxLifetime = agentcert.DefaultLifetime
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.KeyID == "" && len(o.SigningKey) == ed25519.PrivateKeySize {
		o.KeyID = identitydoc.DefaultKeyID(o.SigningKey.Public().(ed25519.PublicKey))
	}
	return o
}

func (o Options) registryOptions() registry.Options {
	ro := registry.Options{
		LifecycleAuth:        o.LifecycleAuth,
		OperatorFingerprints: o.OperatorFingerprints,
		LockTTL:              o.LockTTL,
		LockWait:             o.LockWait,
		AuditTimeout:         o.AuditTimeout,
		LabelReuseAfter:      o.LabelReuseAfter,
		Now:                  o.Now,
	}
	if o.OrgDomain != "" {
		ro.OrgDomains = []string{o.OrgDomain}
	}
	return ro.WithDefaults()
}

// Validate reports every problem at once. Call it on defaulted options.
func (o Options) Validate() error {
	var errs []error
	if len(o.SigningKey) != ed25519.PrivateKeySize {
		errs = append(errs, errors.New("signing key must be an Ed25519 private key"))
	}
	if o.TrustScore <= 0 || o.TrustScore > 1 {
		errs = append(errs, fmt.Errorf("trust score %v is not in (0, 1]", o.TrustScore))
	}
	for _, m := range o.Methods {
		if !agtp.ValidMethodToken(m) {
			errs = append(errs, fmt.Errorf("method %q is not an AGTP method token", m))
		}
	}
	if o.NamespaceMaxAge <= 0 || o.NamespaceMaxAge >= 300*time.Second {
		errs = append(errs, fmt.Errorf("namespace max age %v must be positive and under the 300 s freshness threshold", o.NamespaceMaxAge))
	}
	if o.WatchBuffer < 1 {
		errs = append(errs, errors.New("watch buffer must be at least 1"))
	}
	if o.SessionTTL <= 0 {
		errs = append(errs, errors.New("session TTL must be positive"))
	}
	if o.AgentCertMaxLifetime < time.Second || o.AgentCertMaxLifetime > agentcert.MaxLifetime {
		errs = append(errs, fmt.Errorf("agent certificate max lifetime %v is not between 1s and %v", o.AgentCertMaxLifetime, agentcert.MaxLifetime))
	}
	if o.AgentCA != nil {
		if err := o.AgentCA.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := o.registryOptions().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
