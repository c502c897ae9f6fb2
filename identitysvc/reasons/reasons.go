// Package reasons names the reason tokens identitysvc refuses a Genesis
// registration or an Agent Certificate request with, once, for the
// registry that answers with them and the clients that act on them (the
// agtp command, the demo agent). The lifecycle refusals (agent-suspended,
// agent-not-found, ...) are callerpolicy's.
package reasons

// Refusals of RegisterGenesis (core §6.5.9, docs/identity.md).
const (
	// AgentIDCollision: the registry already holds a document under the
	// Agent-ID, this one or another.
	AgentIDCollision = "agent-id-collision"
	// AgentIDRetired: the Agent-ID was retired; it is never registered
	// again.
	AgentIDRetired = "agent-id-retired"
	// AgentNameTaken: another agent holds the name.
	AgentNameTaken = "agent-name-taken"
	// ExperimentalLabelRequired: a Tier 3 (experimental) agent's name
	// must start with X- (core §6.1.9).
	ExperimentalLabelRequired = "experimental-label-required"
)

// Refusals of IssueAgentCertificate.
const (
	// AgentCANotConfigured: this registrar has no agent CA.
	AgentCANotConfigured = "agent-ca-not-configured"
	// IssuerSignatureInvalid: issuer_signature is not the Genesis issuer
	// key's signature of the request.
	IssuerSignatureInvalid = "issuer-signature-invalid"
	// CertificateLifetimeTooLong: lifetime_seconds is above the maximum.
	CertificateLifetimeTooLong = "certificate-lifetime-too-long"
)
