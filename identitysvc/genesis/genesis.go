// Package genesis is the Agent Genesis of core §6.5.2: the signed origin
// document an agent's canonical Agent-ID is derived from.
//
// The canonical form is RFC 8785 JCS (docs/decisions.md#D-canonical-json).
// Two inputs are derived from it (core §6.5.2):
//
//   - Agent-ID = lowercase hex SHA-256 of JCS(document minus "agent_id"
//     and "signature"), since the ID cannot hash itself;
//   - signature = Ed25519 over JCS(document minus "signature"), so the
//     signature also covers agent_id.
//
// Both are always computed from the document as received (every member,
// including ones this package does not know), never from the decoded
// fields, so a Genesis verifies here exactly as in any other JCS
// implementation. The decoded fields are a read-only view.
//
// Agents and the CLI create a Genesis with Create (or New then Sign);
// services load one with Load, which parses, validates and verifies.
package genesis

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// MaxSize bounds an encoded Genesis; it comes from peers. 32 KiB is far
// more than a real Genesis needs and keeps the agent-genesis-issued
// event, which carries the whole Genesis, under auditsvc's 64 KiB claims
// bound.
const MaxSize = 32 << 10

// Bounds on member sizes, generous for real documents and small enough
// that a registry record stays cheap.
const (
	maxShortString = 256
	maxLongString  = 2048
	maxScopes      = 256
)

// Members of the Genesis (core §6.5.2).
const (
	FieldAgentID           = "agent_id"
	FieldOwner             = "owner"
	FieldArchetype         = "archetype"
	FieldGovernanceZone    = "governance_zone"
	FieldScope             = "scope"
	FieldIssuedAt          = "issued_at"
	FieldIssuerPublicKey   = "issuer_public_key"
	FieldSignature         = "signature"
	FieldPackageRef        = "package_ref"
	FieldTrustTier         = "trust_tier"
	FieldVerificationPath  = "verification_path"
	FieldOrgDomain         = "org_domain"
	FieldOrgLabel          = "org_label"
	FieldLogInclusionProof = "log_inclusion_proof"
	// FieldDelegationPermitted and FieldMaxDelegationDepth are the
	// identity document's delegation_permitted and max_delegation_depth
	// (core §6.3.3), which the agent's issuer states in its Genesis
	// (docs/decisions.md#D-delegation-consent).
	FieldDelegationPermitted = "delegation_permitted"
	FieldMaxDelegationDepth  = "max_delegation_depth"
)

// MaxDelegationDepthLimit bounds max_delegation_depth.
const MaxDelegationDepthLimit = 255

// Archetype is the behavioural category (core §6.5.3). It is an
// observability signal, never a security boundary.
type Archetype string

// The five archetypes.
const (
	ArchetypeAssistant    Archetype = "assistant"
	ArchetypeAnalyst      Archetype = "analyst"
	ArchetypeExecutor     Archetype = "executor"
	ArchetypeOrchestrator Archetype = "orchestrator"
	ArchetypeMonitor      Archetype = "monitor"
)

// Valid reports whether a is one of the five archetypes.
func (a Archetype) Valid() bool {
	switch a {
	case ArchetypeAssistant, ArchetypeAnalyst, ArchetypeExecutor, ArchetypeOrchestrator, ArchetypeMonitor:
		return true
	}
	return false
}

// VerificationPath records how the identity was anchored (core §6.1.9).
type VerificationPath string

// The four verification paths; the first three are Tier 1 paths.
const (
	PathDNSAnchored VerificationPath = "dns-anchored"
	PathLogAnchored VerificationPath = "log-anchored"
	PathHybrid      VerificationPath = "hybrid"
	PathOrgAsserted VerificationPath = "org-asserted"
)

// Valid reports whether p is one of the four paths.
func (p VerificationPath) Valid() bool {
	switch p {
	case PathDNSAnchored, PathLogAnchored, PathHybrid, PathOrgAsserted:
		return true
	}
	return false
}

// Tier1 reports whether p is a Tier 1 (verified) path.
func (p VerificationPath) Tier1() bool {
	return p == PathDNSAnchored || p == PathLogAnchored || p == PathHybrid
}

// Trust tiers (core §6.1.9).
const (
	TierVerified     = 1
	TierOrgAsserted  = 2
	TierExperimental = 3
)

// TrustWarningVerificationIncomplete is the warning every Tier 2 agent
// carries (core §6.1.9).
const TrustWarningVerificationIncomplete = "verification-incomplete"

// Genesis is a parsed Agent Genesis. The exported fields are a decoded
// view of the document; the canonical forms, the Agent-ID and the
// signature are computed from the document itself (see the package
// comment), so changing a field does not change them.
type Genesis struct {
	AgentID         string
	Owner           string
	Archetype       Archetype
	GovernanceZone  string
	Scope           []string
	IssuedAt        time.Time
	IssuerPublicKey ed25519.PublicKey
	// Signature is the raw 64-byte Ed25519 signature; nil before Sign.
	Signature  []byte
	PackageRef string
	TrustTier  int
	// VerificationPath is as declared; EffectivePath fills in the Tier 2
	// default.
	VerificationPath  VerificationPath
	OrgDomain         string
	OrgLabel          string
	LogInclusionProof json.RawMessage
	// DelegationPermitted is delegation_permitted: the agent takes work a
	// DELEGATE hands it. Absent is false.
	DelegationPermitted bool
	// MaxDelegationDepth is max_delegation_depth, the number of
	// delegation hops the agent accepts work through; nil when absent.
	MaxDelegationDepth *int

	obj map[string]any // the document as parsed or built
	raw []byte         // the bytes as received or produced
}

// Load parses, validates and verifies an encoded Genesis: the Agent-ID is
// recomputed and must equal agent_id, and the signature must verify.
// Errors are *Error values.
func Load(data []byte) (*Genesis, error) {
	g, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if err := g.Verify(); err != nil {
		return nil, err
	}
	return g, nil
}

// Parse parses and validates an encoded Genesis without verifying its
// hash or signature (see Verify). Errors are *Error values.
func Parse(data []byte) (*Genesis, error) {
	if len(data) > MaxSize {
		return nil, &Error{Reason: ReasonMalformed, Msg: fmt.Sprintf("document is %d bytes, more than %d", len(data), MaxSize)}
	}
	obj, err := jcs.ParseObject(data)
	if err != nil {
		return nil, &Error{Reason: ReasonMalformed, Msg: err.Error()}
	}
	g, err := decode(obj, true)
	if err != nil {
		return nil, err
	}
	g.raw = append([]byte(nil), data...)
	return g, nil
}

// ComputeAgentID returns the canonical Agent-ID of an encoded Genesis
// without validating its fields: SHA-256 over the JCS form of the
// document minus agent_id and signature, as lowercase hex.
func ComputeAgentID(data []byte) (string, error) {
	obj, err := jcs.ParseObject(data)
	if err != nil {
		return "", &Error{Reason: ReasonMalformed, Msg: err.Error()}
	}
	return agentIDOf(obj)
}

func agentIDOf(obj map[string]any) (string, error) {
	in, err := canonicalWithout(obj, FieldAgentID, FieldSignature)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:]), nil
}

// canonicalWithout is JCS of obj with the named top-level members left out.
func canonicalWithout(obj map[string]any, drop ...string) ([]byte, error) {
	view := make(map[string]any, len(obj))
	for k, v := range obj {
		view[k] = v
	}
	for _, k := range drop {
		delete(view, k)
	}
	b, err := jcs.Append(nil, view)
	if err != nil {
		return nil, &Error{Reason: ReasonMalformed, Msg: err.Error()}
	}
	return b, nil
}

// ComputeAgentID recomputes the canonical Agent-ID from the document.
func (g *Genesis) ComputeAgentID() string {
	id, err := agentIDOf(g.obj)
	if err != nil {
		// obj came from jcs.Parse or from values New checked, so it
		// always encodes.
		panic(err)
	}
	return id
}

// IDInput returns the bytes the Agent-ID hashes: JCS of the document
// without agent_id and signature.
func (g *Genesis) IDInput() []byte {
	b, err := canonicalWithout(g.obj, FieldAgentID, FieldSignature)
	if err != nil {
		panic(err)
	}
	return b
}

// SigningInput returns the bytes the signature covers: JCS of the
// document without signature.
func (g *Genesis) SigningInput() []byte {
	b, err := canonicalWithout(g.obj, FieldSignature)
	if err != nil {
		panic(err)
	}
	return b
}

// Canonical returns the JCS form of the whole document.
func (g *Genesis) Canonical() []byte {
	b, err := jcs.Append(nil, g.obj)
	if err != nil {
		panic(err)
	}
	return b
}

// Bytes returns the document exactly as parsed, or as produced by Sign
// (which emits the canonical form).
func (g *Genesis) Bytes() []byte { return g.raw }

// Verify recomputes the Agent-ID and checks it against agent_id, then
// checks the signature with issuer_public_key. Errors are *Error values
// with ReasonHashMismatch or ReasonSignatureInvalid.
func (g *Genesis) Verify() error {
	if got := g.ComputeAgentID(); got != g.AgentID {
		return &Error{Reason: ReasonHashMismatch, Field: FieldAgentID,
			Msg: fmt.Sprintf("agent_id %s does not match the recomputed hash %s", g.AgentID, got)}
	}
	if len(g.Signature) != ed25519.SignatureSize {
		return &Error{Reason: ReasonSignatureInvalid, Field: FieldSignature, Msg: "the Genesis is not signed"}
	}
	if !ed25519.Verify(g.IssuerPublicKey, g.SigningInput(), g.Signature) {
		return &Error{Reason: ReasonSignatureInvalid, Field: FieldSignature,
			Msg: "signature does not verify with issuer_public_key over the canonical form without signature"}
	}
	return nil
}

// IssuerFingerprint is the Genesis-issuer fingerprint of core §7.2.19.
func (g *Genesis) IssuerFingerprint() string { return Fingerprint(g.IssuerPublicKey) }

// Fingerprint is SHA-256 over a raw 32-byte Ed25519 public key, as 64
// lowercase hex: the Genesis-issuer fingerprint, and what lifecycle
// authorisation compares a client certificate's key with (core §7.2.19).
func Fingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// EffectivePath is the verification path with the Tier 2 default
// (org-asserted) filled in, since every document carries one
// (docs/decisions.md#D-verification-path).
func (g *Genesis) EffectivePath() VerificationPath {
	if g.VerificationPath == "" && g.TrustTier == TierOrgAsserted {
		return PathOrgAsserted
	}
	return g.VerificationPath
}

// TrustWarning returns the trust warning token the agent's responses and
// identity document carry: verification-incomplete for Tier 2, none for
// Tiers 1 and 3 (core §5.5.4, §6.1.9).
func (g *Genesis) TrustWarning() string {
	if g.TrustTier == TierOrgAsserted {
		return TrustWarningVerificationIncomplete
	}
	return ""
}

// Member returns a top-level member of the document as parsed, including
// members this package does not know.
func (g *Genesis) Member(name string) (any, bool) {
	v, ok := g.obj[name]
	return v, ok
}

// decode reads the typed view out of obj and validates it. requireSigned
// is false only while New builds a document that Sign has yet to sign.
func decode(obj map[string]any, requireSigned bool) (*Genesis, error) {
	g := &Genesis{obj: obj}
	var err error
	str := func(field string, required bool, limit int) string {
		if err != nil {
			return ""
		}
		v, ok := obj[field]
		if !ok || v == nil {
			if required {
				err = missing(field)
			}
			return ""
		}
		s, isString := v.(string)
		switch {
		case !isString:
			err = invalid(field, "must be a string")
		case s == "" && required:
			err = missing(field)
		case len(s) > limit:
			err = invalid(field, "is longer than %d bytes", limit)
		}
		return s
	}

	g.AgentID = str(FieldAgentID, true, 64)
	g.Owner = str(FieldOwner, true, maxShortString)
	g.Archetype = Archetype(str(FieldArchetype, true, maxShortString))
	g.GovernanceZone = str(FieldGovernanceZone, true, maxShortString)
	issuedAt := str(FieldIssuedAt, true, 64)
	issuerKey := str(FieldIssuerPublicKey, true, 64)
	sig := str(FieldSignature, requireSigned, 128)
	g.PackageRef = str(FieldPackageRef, false, maxLongString)
	path := str(FieldVerificationPath, false, maxShortString)
	g.OrgDomain = str(FieldOrgDomain, false, 253)
	g.OrgLabel = str(FieldOrgLabel, false, 63)
	if err != nil {
		return nil, err
	}
	g.VerificationPath = VerificationPath(path)

	if !agtp.IsCanonicalID(g.AgentID) {
		return nil, invalid(FieldAgentID, "must be 64 lowercase hex digits")
	}
	if !g.Archetype.Valid() {
		return nil, invalid(FieldArchetype, "%q is not one of assistant, analyst, executor, orchestrator, monitor", g.Archetype)
	}
	if g.IssuedAt, err = time.Parse(time.RFC3339Nano, issuedAt); err != nil {
		return nil, invalid(FieldIssuedAt, "must be an RFC 3339 timestamp")
	}
	key, kerr := decodeB64URL(issuerKey)
	if kerr != nil || len(key) != ed25519.PublicKeySize {
		return nil, invalid(FieldIssuerPublicKey, "must be a 32-byte Ed25519 public key, base64url-encoded")
	}
	g.IssuerPublicKey = ed25519.PublicKey(key)
	if sig != "" {
		s, serr := decodeB64URL(sig)
		if serr != nil || len(s) != ed25519.SignatureSize {
			return nil, invalid(FieldSignature, "must be a 64-byte Ed25519 signature, base64url-encoded")
		}
		g.Signature = s
	}

	if g.Scope, err = decodeScope(obj); err != nil {
		return nil, err
	}
	if g.TrustTier, err = decodeTier(obj); err != nil {
		return nil, err
	}
	if v, ok := obj[FieldLogInclusionProof]; ok && v != nil {
		b, err := jcs.Append(nil, v)
		if err != nil {
			return nil, invalid(FieldLogInclusionProof, "%v", err)
		}
		g.LogInclusionProof = b
	}
	if g.DelegationPermitted, g.MaxDelegationDepth, err = decodeDelegation(obj); err != nil {
		return nil, err
	}
	if g.OrgDomain != "" && !isDomainName(g.OrgDomain) {
		return nil, invalid(FieldOrgDomain, "%q is not a DNS domain name", g.OrgDomain)
	}
	if err := checkPath(g); err != nil {
		return nil, err
	}
	return g, nil
}

func decodeScope(obj map[string]any) ([]string, error) {
	v, ok := obj[FieldScope]
	if !ok || v == nil {
		return nil, missing(FieldScope)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, invalid(FieldScope, "must be an array of scope tokens")
	}
	if len(arr) == 0 {
		return nil, missing(FieldScope)
	}
	if len(arr) > maxScopes {
		return nil, invalid(FieldScope, "has more than %d tokens", maxScopes)
	}
	out := make([]string, 0, len(arr))
	seen := make(map[string]bool, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, invalid(FieldScope, "must be an array of strings")
		}
		if len(s) > maxShortString {
			return nil, invalid(FieldScope, "token longer than %d bytes", maxShortString)
		}
		if _, err := agtp.ParseScope(s); err != nil {
			var pe *agtp.ProtocolError
			if errors.As(err, &pe) {
				return nil, invalid(FieldScope, "%s", pe.Explanation)
			}
			return nil, invalid(FieldScope, "%v", err)
		}
		if seen[s] {
			return nil, invalid(FieldScope, "token %q appears twice", s)
		}
		seen[s] = true
		out = append(out, s)
	}
	return out, nil
}

func decodeTier(obj map[string]any) (int, error) {
	v, ok := obj[FieldTrustTier]
	if !ok || v == nil {
		return 0, missing(FieldTrustTier)
	}
	f, ok := v.(float64)
	if !ok || (f != TierVerified && f != TierOrgAsserted && f != TierExperimental) {
		return 0, invalid(FieldTrustTier, "must be the number 1, 2 or 3")
	}
	return int(f), nil
}

// decodeDelegation reads the optional delegation_permitted (a boolean)
// and max_delegation_depth (an integer from 0 to MaxDelegationDepthLimit).
func decodeDelegation(obj map[string]any) (bool, *int, error) {
	permitted := false
	if v, ok := obj[FieldDelegationPermitted]; ok && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			return false, nil, invalid(FieldDelegationPermitted, "must be true or false")
		}
		permitted = b
	}
	v, ok := obj[FieldMaxDelegationDepth]
	if !ok || v == nil {
		return permitted, nil, nil
	}
	f, isNum := v.(float64)
	if !isNum || f != float64(int(f)) || f < 0 || f > MaxDelegationDepthLimit {
		return false, nil, invalid(FieldMaxDelegationDepth, "must be an integer from 0 to %d", MaxDelegationDepthLimit)
	}
	depth := int(f)
	return permitted, &depth, nil
}

// checkPath applies the verification-path rules of core §6.5.2 and
// §6.1.9: Tier 1 names one of the three Tier 1 paths, with org_domain for
// dns-anchored and hybrid and log_inclusion_proof for log-anchored;
// Tier 2 is org-asserted (absent means org-asserted); Tier 3 may name any
// path or none.
func checkPath(g *Genesis) error {
	p := g.VerificationPath
	if p != "" && !p.Valid() {
		return invalid(FieldVerificationPath, "%q is not one of dns-anchored, log-anchored, hybrid, org-asserted", p)
	}
	switch g.TrustTier {
	case TierVerified:
		if p == "" {
			return &Error{Reason: ReasonFieldMissing, Field: FieldVerificationPath, Msg: "a Tier 1 Genesis must name its verification path"}
		}
		if !p.Tier1() {
			return invalid(FieldVerificationPath, "%q is not a Tier 1 path (dns-anchored, log-anchored or hybrid)", p)
		}
	case TierOrgAsserted:
		if p != "" && p != PathOrgAsserted {
			return invalid(FieldVerificationPath, "a Tier 2 Genesis is org-asserted, not %q", p)
		}
	}
	if (p == PathDNSAnchored || p == PathHybrid) && g.OrgDomain == "" {
		return &Error{Reason: ReasonFieldMissing, Field: FieldOrgDomain, Msg: fmt.Sprintf("verification path %s requires org_domain", p)}
	}
	if p == PathLogAnchored && len(g.LogInclusionProof) == 0 {
		return &Error{Reason: ReasonFieldMissing, Field: FieldLogInclusionProof, Msg: "verification path log-anchored requires log_inclusion_proof"}
	}
	return nil
}

// decodeB64URL accepts base64url with or without padding; documents made
// with Python's urlsafe_b64encode carry padding, JOSE-style ones do not.
func decodeB64URL(s string) ([]byte, error) {
	if strings.ContainsAny(s, "+/") {
		return nil, errors.New("standard base64 alphabet")
	}
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// EncodeKey renders a raw Ed25519 public key as Genesis and identity
// documents carry it: base64url without padding.
func EncodeKey(pub ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(pub) }

// isDomainName is a lenient DNS name check for org_domain.
func isDomainName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
