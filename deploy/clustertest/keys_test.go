package clustertest

import (
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/rediskeys"
)

// slot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag (the
// part between the first '{' and the next '}', when not empty) or of the
// whole key, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestSlotMatchesRedis(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": 8363, "{}foo": 9500, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestAgentKeysShareOneSlot pins the rule every per-agent Lua script relies
// on (docs/operations.md "Redis"): all keys of one agent hash to one slot.
// The live cluster test catches a script that breaks it (CROSSSLOT); this
// one covers every key function, including those no test path reaches.
func TestAgentKeysShareOneSlot(t *testing.T) {
	agents := []string{strings.Repeat("ab", 32), strings.Repeat("0", 64), rediskeys.ServerChain, ""}
	for _, a := range agents {
		keys := map[string]string{
			"ChainHead":          rediskeys.ChainHead(a),
			"ChainStream":        rediskeys.ChainStream(a),
			"LifecycleStream":    rediskeys.LifecycleStream(a),
			"LifecycleHead":      rediskeys.LifecycleHead(a),
			"IdempotencySlot":    rediskeys.IdempotencySlot(a, "any key {with} braces"),
			"Agent":              rediskeys.Agent(a),
			"AgentContracts":     rediskeys.AgentContracts(a),
			"AgentRateLimit":     rediskeys.AgentRateLimit(a, "ep:0123"),
			"AgentLifecycleLock": rediskeys.AgentLifecycleLock(a),
			"SignedStream":       rediskeys.SignedStream(a, "confirm"),
			"SignedStreamHead":   rediskeys.SignedStreamHead(a, "confirm"),
			"RCNSProposal":       rediskeys.RCNSProposal(a, "prop-1"),
			"RCNSNegotiation":    rediskeys.RCNSNegotiation(a, "6f1c2a9e-0d4b-4c3e-9a7f-2b8d1e5c4a30"),
		}
		want := slot(rediskeys.ChainHead(a))
		for name, k := range keys {
			if got := slot(k); got != want {
				t.Errorf("agent %q: %s %q is in slot %d, the agent's chain head in %d", a, name, k, got, want)
			}
		}
	}
	// Anonymous callers' buckets of one address share a slot too.
	for _, ip := range []string{"192.0.2.7", "2001:db8::1", "unknown"} {
		if slot(rediskeys.AnonymousRateLimit(ip, "tier")) != slot(rediskeys.AnonymousRateLimit(ip, "ep:0123")) {
			t.Errorf("anonymous buckets of %s are on two slots", ip)
		}
	}
	// Different agents spread over the cluster rather than piling onto
	// one slot.
	seen := map[int]bool{}
	for i := range 64 {
		seen[slot(rediskeys.ChainHead(strings.Repeat(string(rune('a'+i%26)), 1+i)))] = true
	}
	if len(seen) < 32 {
		t.Errorf("64 agents fell into %d slots", len(seen))
	}
}
