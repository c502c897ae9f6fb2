package genesis

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agtpsuite/agtp/services/jcs"
)

// Template holds the members of a Genesis to be created. agent_id,
// issuer_public_key and signature are filled in by New and Sign.
type Template struct {
	Owner          string
	Archetype      Archetype
	GovernanceZone string
	Scope          []string
	// IssuedAt defaults to now, in UTC, to the second.
	IssuedAt         time.Time
	PackageRef       string
	TrustTier        int
	VerificationPath VerificationPath
	OrgDomain        string
	OrgLabel         string
	// LogInclusionProof is any JSON value; required for log-anchored.
	LogInclusionProof json.RawMessage
	// Extra members, covered by the Agent-ID and the signature like the
	// others. They may not shadow the members above.
	Extra map[string]any
}

// New builds an unsigned Genesis issued by issuer and computes its
// Agent-ID. Sign it with the issuer's private key before use.
func New(t Template, issuer ed25519.PublicKey) (*Genesis, error) {
	if len(issuer) != ed25519.PublicKeySize {
		return nil, invalid(FieldIssuerPublicKey, "must be a 32-byte Ed25519 public key")
	}
	issuedAt := t.IssuedAt
	if issuedAt.IsZero() {
		issuedAt = time.Now()
	}
	obj := map[string]any{}
	for k, v := range t.Extra {
		obj[k] = v
	}
	set := func(k string, v any) error {
		if _, clash := t.Extra[k]; clash {
			return invalid(k, "is set both as a field and in Extra")
		}
		obj[k] = v
		return nil
	}
	scope := make([]any, len(t.Scope))
	for i, s := range t.Scope {
		scope[i] = s
	}
	type member struct {
		k string
		v any
	}
	members := []member{
		{FieldOwner, t.Owner},
		{FieldArchetype, string(t.Archetype)},
		{FieldGovernanceZone, t.GovernanceZone},
		{FieldScope, scope},
		{FieldIssuedAt, issuedAt.UTC().Truncate(time.Second).Format(time.RFC3339)},
		{FieldIssuerPublicKey, EncodeKey(issuer)},
		{FieldTrustTier, float64(t.TrustTier)},
	}
	for _, opt := range []struct{ k, v string }{
		{FieldPackageRef, t.PackageRef},
		{FieldVerificationPath, string(t.VerificationPath)},
		{FieldOrgDomain, t.OrgDomain},
		{FieldOrgLabel, t.OrgLabel},
	} {
		if opt.v != "" {
			members = append(members, member{opt.k, opt.v})
		}
	}
	if len(t.LogInclusionProof) > 0 {
		v, err := jcs.Parse(t.LogInclusionProof)
		if err != nil {
			return nil, invalid(FieldLogInclusionProof, "%v", err)
		}
		members = append(members, member{FieldLogInclusionProof, v})
	}
	if _, clash := t.Extra[FieldAgentID]; clash {
		return nil, invalid(FieldAgentID, "is computed, not set through Extra")
	}
	if _, clash := t.Extra[FieldSignature]; clash {
		return nil, invalid(FieldSignature, "is computed, not set through Extra")
	}
	for _, m := range members {
		if err := set(m.k, m.v); err != nil {
			return nil, err
		}
	}
	id, err := agentIDOf(obj)
	if err != nil {
		return nil, err
	}
	obj[FieldAgentID] = id
	g, err := decode(obj, false)
	if err != nil {
		return nil, err
	}
	g.raw, err = jcs.Append(nil, obj)
	if err != nil {
		return nil, &Error{Reason: ReasonMalformed, Msg: err.Error()}
	}
	return g, nil
}

// Sign signs the Genesis with the issuer's private key, which must match
// issuer_public_key, and replaces Bytes with the signed canonical form.
// Signing again replaces the signature.
func (g *Genesis) Sign(priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return errors.New("genesis: private key is not an Ed25519 key")
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	if !bytes.Equal(pub, g.IssuerPublicKey) {
		return errors.New("genesis: private key does not belong to issuer_public_key")
	}
	if got := g.ComputeAgentID(); got != g.AgentID {
		return fmt.Errorf("genesis: agent_id does not match the document: %w",
			&Error{Reason: ReasonHashMismatch, Field: FieldAgentID, Msg: "recomputed " + got})
	}
	sig := ed25519.Sign(priv, g.SigningInput())
	g.obj[FieldSignature] = base64.RawURLEncoding.EncodeToString(sig)
	g.Signature = sig
	raw, err := jcs.Append(nil, g.obj)
	if err != nil {
		return fmt.Errorf("genesis: %w", err)
	}
	g.raw = raw
	return nil
}

// ParseForSigning prepares an edited Genesis for Sign: it drops any
// signature, fills in issuer_public_key from issuer when the document has
// none (issuer may be nil), recomputes agent_id from the document (an edit
// changes the Agent-ID), and validates the other members as Parse does.
// Unknown members are kept, so they stay covered by the new Agent-ID and
// signature. Errors are *Error values.
func ParseForSigning(data []byte, issuer ed25519.PublicKey) (*Genesis, error) {
	if len(data) > MaxSize {
		return nil, &Error{Reason: ReasonMalformed, Msg: fmt.Sprintf("document is %d bytes, more than %d", len(data), MaxSize)}
	}
	obj, err := jcs.ParseObject(data)
	if err != nil {
		return nil, &Error{Reason: ReasonMalformed, Msg: err.Error()}
	}
	delete(obj, FieldSignature)
	if _, ok := obj[FieldIssuerPublicKey]; !ok && issuer != nil {
		if len(issuer) != ed25519.PublicKeySize {
			return nil, invalid(FieldIssuerPublicKey, "must be a 32-byte Ed25519 public key")
		}
		obj[FieldIssuerPublicKey] = EncodeKey(issuer)
	}
	id, err := agentIDOf(obj)
	if err != nil {
		return nil, err
	}
	obj[FieldAgentID] = id
	g, err := decode(obj, false)
	if err != nil {
		return nil, err
	}
	if g.raw, err = jcs.Append(nil, obj); err != nil {
		return nil, &Error{Reason: ReasonMalformed, Msg: err.Error()}
	}
	return g, nil
}

// Create builds and signs a Genesis in one step.
func Create(t Template, priv ed25519.PrivateKey) (*Genesis, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, errors.New("genesis: private key is not an Ed25519 key")
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	g, err := New(t, pub)
	if err != nil {
		return nil, err
	}
	if err := g.Sign(priv); err != nil {
		return nil, err
	}
	return g, nil
}
