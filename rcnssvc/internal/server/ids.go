package server

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"strings"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Identifier prefixes. Every identifier carries 128 random bits.
const (
	prefixSynthesis = "syn_"
	prefixAttempt   = "rat_"
	prefixProposal  = "prp_"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newID mints prefix + 26 lowercase base32 characters (128 bits).
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// validID reports whether s has the form newID(prefix) makes, so no
// peer-chosen string reaches a Redis key.
func validID(prefix, s string) bool {
	if len(s) != len(prefix)+26 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// newUUID mints a random (version 4) UUID: the Negotiation-ID (core §7.4.1).
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// canonicalUUID lowercases s when it is a UUID, else returns "".
func canonicalUUID(s string) string {
	if len(s) != 36 {
		return ""
	}
	s = strings.ToLower(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return ""
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return ""
			}
		}
	}
	return s
}

// validAgentID is the canonical Agent-ID form: 64 lowercase hex.
func validAgentID(s string) bool { return agtp.IsCanonicalID(s) }

// scopesOf parses the caller's scopes, skipping malformed tokens (the
// front door has validated them; a bad one must not widen anything).
func scopesOf(c *rcnsv1.Caller) agtp.ScopeSet {
	out := make(agtp.ScopeSet, 0, len(c.GetScopes()))
	for _, raw := range c.GetScopes() {
		if sc, err := agtp.ParseScope(raw); err == nil {
			out = append(out, sc)
		}
	}
	return out
}

// holds reports whether the caller's scopes cover one scope token.
func holds(set agtp.ScopeSet, scope string) bool {
	sc, err := agtp.ParseScope(scope)
	return err == nil && set.Covers(sc)
}

// tierPasses is the trust-tier rule (docs/decisions.md#D-rcns-trust-tier):
// tier 1 is the most trusted, so a caller passes when 1 <= tier <= min. An
// unknown tier (0) never passes.
func tierPasses(tier, minTier int32) bool { return tier >= 1 && tier <= minTier }
