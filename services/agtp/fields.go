package agtp

// Header field names, spelled as the core draft spells them. The parser
// stores these exact strings for any field whose name matches one of them
// case-insensitively, so comparing a parsed Field.Name with == works for
// every name in this file.

// Request fields (core §5.5.3).
const (
	HeaderAgentID                     = "Agent-ID"
	HeaderAuthorityScope              = "Authority-Scope"
	HeaderSessionID                   = "Session-ID"
	HeaderTaskID                      = "Task-ID"
	HeaderDelegationChain             = "Delegation-Chain"
	HeaderMerchantID                  = "Merchant-ID"
	HeaderMerchantManifestFingerprint = "Merchant-Manifest-Fingerprint"
	HeaderIntentAssertion             = "Intent-Assertion"
	HeaderCartDigest                  = "Cart-Digest"
	HeaderAuthorization               = "Authorization"
	HeaderAllowRCNS                   = "Allow-RCNS"
	HeaderContractSynthesized         = "Contract-Synthesized" // also a response field
	HeaderIdempotencyKey              = "Idempotency-Key"
	HeaderRequestID                   = "Request-ID"
	HeaderNegotiationID               = "Negotiation-ID" // core §7.4.1; both directions
)

// Response fields (core §5.5.4, §7.6.7, AGTP-API).
const (
	HeaderServerID            = "Server-ID"
	HeaderResponseID          = "Response-ID"
	HeaderAuditID             = "Audit-ID"
	HeaderOwnerID             = "Owner-ID"
	HeaderTrustTier           = "Trust-Tier"
	HeaderVerificationPath    = "Verification-Path"
	HeaderTrustWarning        = "Trust-Warning"
	HeaderRCNSAttemptID       = "RCNS-Attempt-Id"
	HeaderAttributionRecord   = "Attribution-Record"
	HeaderContinuationToken   = "Continuation-Token"
	HeaderSupportedMethods    = "Supported-Methods"
	HeaderCostEstimate        = "Cost-Estimate"
	HeaderAttestationEvidence = "Attestation-Evidence"
	HeaderAPIVersion          = "AGTP-API-Version"
	HeaderCatalogWarning      = "AGTP-Catalog-Warning"
	HeaderEndpointWarning     = "AGTP-Endpoint-Warning"
)

// Reserved fields (core §5.5.5): a server must not require them and may
// ignore them; they are listed so that they parse to one spelling.
const (
	HeaderPriority        = "Priority"
	HeaderTTL             = "TTL"
	HeaderBudgetLimit     = "Budget-Limit"
	HeaderZoneID          = "AGTP-Zone-ID"
	HeaderContentSchema   = "Content-Schema"
	HeaderTelemetryExport = "Telemetry-Export"
)

// Retired fields (core §5.5.6). ReadRequest rejects a request carrying any
// of them with 400 retired-header, and Write never emits them.
const (
	HeaderRetiredVersion       = "AGTP-Version"
	HeaderRetiredMethod        = "AGTP-Method"
	HeaderRetiredStatus        = "AGTP-Status"
	HeaderRetiredPrincipalID   = "Principal-ID"
	HeaderRetiredServerAgentID = "Server-Agent-ID"
)

// Framing, tracing and implementation fields. Implementation fields carry
// the X- prefix because core §5.5.4 gives X- fields no protocol meaning:
// a peer that ignores them still interoperates.
const (
	HeaderContentType      = "Content-Type"
	HeaderContentLength    = "Content-Length"
	HeaderTransferEncoding = "Transfer-Encoding" // never valid in AGTP; listed to be refused
	HeaderTraceparent      = "Traceparent"
	HeaderTracestate       = "Tracestate"
	// HeaderIdempotentReplayed marks a response replayed from the
	// idempotency cache (value "true").
	HeaderIdempotentReplayed = "X-Idempotent-Replayed"
	// HeaderStream marks a response that is not the last of a series; see
	// [Stream].
	HeaderStream = "X-AGTP-Stream"
)

// Media types (core §5.7, §11.4).
const (
	MediaTypeJSON         = "application/vnd.agtp+json"
	MediaTypeYAML         = "application/vnd.agtp+yaml"
	MediaTypeIdentityJSON = "application/vnd.agtp.identity+json"
	MediaTypeIdentityYAML = "application/vnd.agtp.identity+yaml"
	MediaTypeManifestJSON = "application/vnd.agtp.manifest+json"
	MediaTypeEndpointJSON = "application/vnd.agtp.endpoint+json"
)

// knownFields is every name above. Parsed names that match one of these
// case-insensitively are replaced by the constant, which costs no
// allocation and gives every consumer the draft's spelling.
var knownFields = [...]string{
	HeaderAgentID, HeaderAuthorityScope, HeaderSessionID, HeaderTaskID,
	HeaderDelegationChain, HeaderMerchantID, HeaderMerchantManifestFingerprint,
	HeaderIntentAssertion, HeaderCartDigest, HeaderAuthorization, HeaderAllowRCNS,
	HeaderContractSynthesized, HeaderIdempotencyKey, HeaderRequestID,
	HeaderNegotiationID,
	HeaderServerID, HeaderResponseID, HeaderAuditID, HeaderOwnerID, HeaderTrustTier,
	HeaderVerificationPath, HeaderTrustWarning, HeaderRCNSAttemptID,
	HeaderAttributionRecord, HeaderContinuationToken, HeaderSupportedMethods,
	HeaderCostEstimate, HeaderAttestationEvidence, HeaderAPIVersion,
	HeaderCatalogWarning, HeaderEndpointWarning,
	HeaderPriority, HeaderTTL, HeaderBudgetLimit, HeaderZoneID, HeaderContentSchema,
	HeaderTelemetryExport,
	HeaderRetiredVersion, HeaderRetiredMethod, HeaderRetiredStatus,
	HeaderRetiredPrincipalID, HeaderRetiredServerAgentID,
	HeaderContentType, HeaderContentLength, HeaderTransferEncoding,
	HeaderTraceparent, HeaderTracestate, HeaderIdempotentReplayed, HeaderStream,
}

// maxKnownLen is the length of the longest name above
// (Merchant-Manifest-Fingerprint, 29 bytes): longer names are unknown.
const maxKnownLen = 32

// knownTable is an open-addressing hash table of knownFields, keyed by a
// case-insensitive hash of a few bytes, so that CanonicalName compares a
// name with about one candidate. It runs for every parsed field.
var knownTable = func() (t [256]string) {
	for _, n := range knownFields {
		h := knownHash(n)
		for t[h] != "" {
			h++
		}
		t[h] = n
	}
	return t
}()

func knownHash(s string) uint8 {
	return uint8(len(s)*13 + int(lower(s[0]))*7 + int(lower(s[len(s)/2]))*3 + int(lower(s[len(s)-1])))
}

// CanonicalName returns the draft's spelling of name when name is one of
// the fields this package knows (compared case-insensitively), and name
// unchanged otherwise. It never allocates.
func CanonicalName(name string) string {
	if name == "" || len(name) > maxKnownLen {
		return name
	}
	for h := knownHash(name); ; h++ { // ends: the table is never full
		k := knownTable[h]
		if k == "" {
			return name
		}
		if equalFold(k, name) {
			return k
		}
	}
}

// IsRetired reports whether name is one of the fields core §5.5.6 retired.
func IsRetired(name string) bool {
	switch CanonicalName(name) {
	case HeaderRetiredVersion, HeaderRetiredMethod, HeaderRetiredStatus,
		HeaderRetiredPrincipalID, HeaderRetiredServerAgentID:
		return true
	}
	return false
}
