// Package inspect holds the read-access rules of INSPECT (core §7.2.4) for
// the front door, which knows the caller's verified identity; auditsvc
// supplies the subject of each record (GetRecord's chain_agent_id, or the
// agent_id a chain_head or lifecycle read names).
package inspect

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Mode is the operator's read-ACL mode.
type Mode string

// The three modes of core §7.2.4.
const (
	// Public lets any caller read any record (the default).
	Public Mode = "public"
	// AgentOnly lets a caller authenticated as Agent-ID X read records
	// whose subject is X.
	AgentOnly Mode = "agent_only"
	// OperatorOnly lets only callers whose client-certificate public-key
	// fingerprint is on the allowlist read.
	OperatorOnly Mode = "operator_only"
)

// ParseMode reads a mode from configuration; "" is Public.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", Public:
		return Public, nil
	case AgentOnly, OperatorOnly:
		return Mode(s), nil
	}
	return "", fmt.Errorf("inspect: unknown read ACL mode %q (public, agent_only, operator_only)", s)
}

// Caller is the verified identity of an INSPECT request.
type Caller struct {
	// AgentID is set only when the caller presented a verified client
	// certificate that authenticates its Agent-ID header (the front door:
	// the certificate carries that agent's Genesis issuer key).
	AgentID string
	// KeyFingerprint is the lowercase hex SHA-256 of the client
	// certificate's public key (SubjectPublicKeyInfo DER), "" without one.
	KeyFingerprint string
}

// Authenticated reports whether the caller has any verified identity.
func (c Caller) Authenticated() bool { return c.AgentID != "" || c.KeyFingerprint != "" }

// KeyFingerprint computes Caller.KeyFingerprint from a certificate's
// RawSubjectPublicKeyInfo.
func KeyFingerprint(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:])
}

// ACL is a configured read-access rule.
type ACL struct {
	Mode Mode
	// Operators are the allowed key fingerprints under OperatorOnly
	// (lowercase hex).
	Operators map[string]bool
}

// NewACL builds an ACL; fingerprints are normalised to lowercase.
func NewACL(mode Mode, operatorFingerprints ...string) ACL {
	a := ACL{Mode: mode, Operators: map[string]bool{}}
	for _, f := range operatorFingerprints {
		a.Operators[strings.ToLower(strings.TrimSpace(f))] = true
	}
	return a
}

// Precheck runs before any lookup: 401 without an identity when a mode
// other than public is configured, and the operator allowlist. Refusing
// here keeps an unauthenticated caller from learning whether a record
// exists.
func (a ACL) Precheck(c Caller) error {
	switch a.Mode {
	case "", Public:
		return nil
	case AgentOnly:
		switch {
		case c.KeyFingerprint == "" && c.AgentID == "":
			return grpcerr.Unauthenticated("acl-anonymous-blocked", "INSPECT requires an mTLS-authenticated Agent-ID (read ACL mode agent_only)", "mode", string(a.Mode))
		case c.AgentID == "":
			// Authenticated, but as no agent: 403, not 401 (core §7.2.4).
			return grpcerr.PermissionDenied("inspect-forbidden", "the client certificate does not authenticate the Agent-ID (read ACL mode agent_only)", "mode", string(a.Mode))
		}
		return nil
	case OperatorOnly:
		if c.KeyFingerprint == "" {
			return grpcerr.Unauthenticated("acl-anonymous-blocked", "INSPECT requires an operator client certificate (read ACL mode operator_only)", "mode", string(a.Mode))
		}
		if !a.Operators[c.KeyFingerprint] {
			return grpcerr.PermissionDenied("inspect-forbidden", "this client certificate may not read the audit store (read ACL mode operator_only)", "mode", string(a.Mode))
		}
		return nil
	}
	return grpcerr.PermissionDenied("inspect-forbidden", "the read ACL is misconfigured", "mode", string(a.Mode))
}

// Allow decides a read of a record, chain head or lifecycle stream whose
// subject Agent-ID is subject ("" for the server's own chain). It includes
// Precheck. Errors never name the subject or the allowlist.
func (a ACL) Allow(c Caller, subject string) error {
	if err := a.Precheck(c); err != nil {
		return err
	}
	if a.Mode == AgentOnly && (subject == "" || subject != c.AgentID) {
		return grpcerr.PermissionDenied("inspect-forbidden", "records about other agents are not readable (read ACL mode agent_only)", "mode", string(a.Mode))
	}
	return nil
}
