// Package rediskeys names every Redis key the suite writes, in one place.
//
// Keys of one agent share the hash tag {<agent_id>} so that a Lua script
// touching an agent's chain head, stream and idempotency slots runs on one
// Redis Cluster slot. Keys that are not per agent use their own tag.
package rediskeys

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Prefix starts every key of the suite.
const Prefix = "agtp:"

// ServerChain is the chain of the server's own records (summaries) and
// the name of anonymous traffic's chains, which are spread over shards
// of it (ServerChainShard).
const ServerChain = "server"

// ServerChainShard is the n-th chain anonymous traffic is spread over:
// with one chain, every anonymous append would wait for the one before it
// (a chain appends one record at a time), and in a Redis Cluster all of
// them would land on one node.
func ServerChainShard(n int) string { return ServerChain + "-" + strconv.Itoa(n) }

// IsServerChain reports whether a chain is the server chain or one of its
// shards: a chain of no agent.
func IsServerChain(chain string) bool {
	if chain == ServerChain {
		return true
	}
	n, ok := strings.CutPrefix(chain, ServerChain+"-")
	if !ok || n == "" || len(n) > 4 {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}

// tag returns the hash-tagged agent part, using the server chain for
// anonymous callers.
func tag(agentID string) string {
	if agentID == "" {
		agentID = ServerChain
	}
	return Prefix + "{" + agentID + "}"
}

// ChainHead holds an agent's newest Audit-ID and chain length (a hash:
// fields "head" and "length").
func ChainHead(agentID string) string { return tag(agentID) + ":chain:head" }

// ChainStream is the Redis stream of an agent's records, oldest first.
func ChainStream(agentID string) string { return tag(agentID) + ":chain:records" }

// LifecycleStream is the Redis stream of an agent's lifecycle events.
func LifecycleStream(agentID string) string { return tag(agentID) + ":lifecycle" }

// AuditIndex maps one Audit-ID to where its record is stored.
func AuditIndex(auditID string) string { return Prefix + "auditidx:{" + auditID + "}" }

// IdempotencySlot is the (Agent-ID, Idempotency-Key) slot: a hash with the
// fields of the Slot* constants. The key is hashed so that any client-chosen
// Idempotency-Key makes a bounded, safe key.
func IdempotencySlot(agentID, idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return tag(agentID) + ":idem:" + hex.EncodeToString(sum[:])
}

// Fields of an idempotency slot hash.
const (
	// SlotState is "pending" while the first request runs, "done" after.
	SlotState = "state"
	// SlotToken proves which request holds the claim.
	SlotToken = "token"
	// SlotFingerprint is the request fingerprint (SHA-256 of method, path
	// and JCS body) the key was first used with.
	SlotFingerprint = "fingerprint"
	// SlotResponse is the stored response, without per-response identifiers.
	SlotResponse = "response"
)

// Slot states.
const (
	SlotPending = "pending"
	SlotDone    = "done"
)

// RateLimit is a rate-limit bucket for one limit scope and subject.
func RateLimit(scope, subject string) string {
	return Prefix + "rl:{" + scope + ":" + subject + "}"
}

// Agent is an agent's registry record.
func Agent(agentID string) string { return tag(agentID) + ":agent" }

// AgentName maps an agent label to its canonical ID.
func AgentName(name string) string { return Prefix + "agentname:{" + name + "}" }

// AgentIndex is the set of all registered Agent-IDs.
const AgentIndex = Prefix + "agents"

// AgentEvents is the pub/sub channel of registry changes.
const AgentEvents = Prefix + "events:agents"

// Contract is a synthesized contract by synthesis ID.
func Contract(synthesisID string) string { return Prefix + "contract:{" + synthesisID + "}" }

// AgentContracts is the set of an agent's contract IDs.
func AgentContracts(agentID string) string { return tag(agentID) + ":contracts" }

// RCNSAttempt is a failed synthesis attempt.
func RCNSAttempt(attemptID string) string { return Prefix + "rcnsattempt:{" + attemptID + "}" }

// Endpoints holds operator and persistent endpoints registered at run time.
const Endpoints = Prefix + "catalog:endpoints"

// CatalogEvents is the pub/sub channel of catalog changes.
const CatalogEvents = Prefix + "events:catalog"

// AgentRateLimit is a rate-limit bucket kept under the agent's hash tag, so
// that one Lua script can spend it together with the agent's idempotency
// slot (a per-agent tier or a per-agent endpoint limit, told apart by name).
func AgentRateLimit(agentID, name string) string { return tag(agentID) + ":rl:" + name }

// AgentLifecycleLock serialises lifecycle transitions of one agent across
// identitysvc replicas, so that the signed event and the state change
// happen in one order (a string holding the holder's token, with a TTL).
func AgentLifecycleLock(agentID string) string { return tag(agentID) + ":lifecycle:lock" }

// SessionBinding binds a Session-ID to the Agent-ID and TLS client key
// fingerprint it was first seen with (a hash with fields "agent_id" and
// "client_key", with a TTL). The key is hashed so that any client-chosen
// Session-ID makes a bounded, safe key.
func SessionBinding(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return Prefix + "session:{" + hex.EncodeToString(sum[:]) + "}"
}

// Fields of a ChainHead hash (and of every signed-stream head).
const (
	// HeadAuditID is the newest Audit-ID of the chain.
	HeadAuditID = "head"
	// HeadLength is the number of records in the chain.
	HeadLength = "length"
)

// LifecycleHead is the head of an agent's lifecycle stream (a hash with
// HeadAuditID and HeadLength): lifecycle events are hash-linked too.
func LifecycleHead(agentID string) string { return tag(agentID) + ":lifecycle:head" }

// SignedStream is a named per-agent stream of signed records other than
// Attribution-Records and lifecycle events (e.g. "confirm" for CONFIRM
// attestations, "rcns-attempt" for RCNS attempt records). name is a
// lowercase token without ':'.
func SignedStream(agentID, name string) string { return tag(agentID) + ":signed:" + name }

// SignedStreamHead is the head hash of SignedStream(agentID, name).
func SignedStreamHead(agentID, name string) string { return tag(agentID) + ":signed:" + name + ":head" }

// ChainCheckpoint is the signed checkpoint of an agent's attribution
// chain after its oldest records were moved to the archive (a hash: fields
// CheckpointJWS and CheckpointSequence), next to the chain head.
func ChainCheckpoint(agentID string) string { return tag(agentID) + ":chain:checkpoint" }

// LifecycleCheckpoint is ChainCheckpoint for the lifecycle stream.
func LifecycleCheckpoint(agentID string) string { return tag(agentID) + ":lifecycle:checkpoint" }

// SignedStreamCheckpoint is ChainCheckpoint for SignedStream(agentID, name).
func SignedStreamCheckpoint(agentID, name string) string {
	return tag(agentID) + ":signed:" + name + ":checkpoint"
}

// Fields of a checkpoint hash.
const (
	// CheckpointJWS is the signed checkpoint record.
	CheckpointJWS = "jws"
	// CheckpointSequence is the last sequence the checkpoint covers (the
	// same value as in the signed record, readable by a script).
	CheckpointSequence = "sequence"
)

// AnonymousRateLimit is a rate-limit bucket of anonymous callers from one
// client address; like AgentRateLimit, the buckets of one address share a
// hash tag so one script spends them together.
func AnonymousRateLimit(clientIP, name string) string {
	return Prefix + "rl:{anon:" + clientIP + "}:" + name
}

// CatalogVersion is the catalog service's manifest version counter: a hash
// with fields "counter" (never decreases, never reused), "hash" (content
// hash of the configuration the counter was bumped for), "updated" and
// "issued" (RFC 3339), so every replica with the same configuration
// publishes the same AGTP-API-Version, document_version and timestamps.
const CatalogVersion = Prefix + "catalog:version"

// rcnssvc keys. A contract (Contract) is a hash: "rec" (the immutable
// record as JSON), "state", "reason", "actor", "changed" and "event" (a
// lifecycle event not yet audited). AgentContracts is kept as a hash: field
// synthesis ID -> a JSON summary {method, path, session, issued, expiry},
// so one script can cap an agent's live contracts on its own slot.

// ContractIndex is the sorted set of live contracts (synthesis ID scored
// by expiry in Unix ms): the expiry janitor, inspect:all listings and the
// stale-contract sweep walk it.
const ContractIndex = Prefix + "{contracts}:index"

// RCNSPromotion is the claim of a catalog pair (method, path template) by
// the persistent contract that promotes it: a string holding its synthesis
// ID, expiring with the contract's record. The pair is hashed, so neither
// a template's braces nor a proposer's text shapes the key, and each claim
// is its own hash tag.
func RCNSPromotion(method, path string) string {
	sum := sha256.Sum256([]byte(method + " " + path))
	return Prefix + "rcnspromotion:{" + hex.EncodeToString(sum[:16]) + "}"
}

// RCNSUnpromoteQueue is the sorted set of pending removals of promoted
// endpoints (a JSON entry scored by when the janitor may try it, Unix ms).
// It shares ContractIndex's hash tag.
const RCNSUnpromoteQueue = Prefix + "{contracts}:unpromote"

// RCNSAttemptRing lists recent attempt IDs, newest first, capped: the
// bounded ring of core §7.2.4. The records are RCNSAttempt keys with a TTL.
const RCNSAttemptRing = Prefix + "{rcnsattempts}:ring"

// RCNSProposal is a PROPOSE evaluated asynchronously (261): a hash with
// fields "state" (pending or done), "result" and "deadline". proposalID is
// server-minted and checked before use.
func RCNSProposal(agentID, proposalID string) string {
	return tag(agentID) + ":proposal:" + proposalID
}

// RCNSNegotiation counts the PROPOSE turns of one Negotiation-ID (core
// §7.4.1). negotiationID is a UUID, checked before use.
func RCNSNegotiation(agentID, negotiationID string) string {
	return tag(agentID) + ":negotiation:" + negotiationID
}

// RCNSRecipe is a recipe version captured by a contract, so that a contract
// keeps running under it after the recipe is edited (AGTP-API §10.5). name
// and version are checked recipe tokens (no braces).
func RCNSRecipe(name, version string) string {
	return Prefix + "recipe:{" + name + "}:" + version
}

// taskTag is the hash tag of one task of one owner: the task, its
// escalations and its confirmations share a slot, so a CONFIRM resolves
// an escalation and resumes its task in one transaction. Task-IDs are
// chosen by the caller, so the tag is a digest of (owner, Task-ID).
func taskTag(ownerAgentID, taskID string) string {
	sum := sha256.Sum256([]byte(ownerAgentID + "\x00" + taskID))
	return Prefix + "task:{" + hex.EncodeToString(sum[:16]) + "}"
}

// TaskRun is the request an agent last sent under a Task-ID, kept for
// RETRY (standard methods §8.5; a hash). It is under the agent's tag, and
// Task-IDs are chosen by the caller, so the Task-ID part is a digest.
func TaskRun(agentID, taskID string) string {
	sum := sha256.Sum256([]byte(taskID))
	return tag(agentID) + ":taskrun:" + hex.EncodeToString(sum[:16])
}

// Task is a task's state (JSON: status, owner, history).
func Task(ownerAgentID, taskID string) string { return taskTag(ownerAgentID, taskID) + ":state" }

// TaskEscalation is one escalation of a task (JSON).
func TaskEscalation(ownerAgentID, taskID, escalationID string) string {
	return taskTag(ownerAgentID, taskID) + ":esc:" + escalationID
}

// TaskConfirmation is the CONFIRM of a task or of one of its escalations
// (JSON), kept so that CONFIRM replays.
func TaskConfirmation(ownerAgentID, taskID, targetID string) string {
	return taskTag(ownerAgentID, taskID) + ":confirm:" + targetID
}

// EscalationIndex maps an escalation_id to its owner and Task-ID.
func EscalationIndex(escalationID string) string { return Prefix + "escidx:{" + escalationID + "}" }

// EscalationsPending is a sorted set of pending escalation_ids scored by
// creation time (ms), for the admin listing.
const EscalationsPending = Prefix + "{escalations}:pending"

// Notification is one NOTIFY with its delivery state (JSON).
func Notification(notificationID string) string { return Prefix + "notif:{" + notificationID + "}" }

// NotificationsDue is a sorted set of notification_ids scored by the time
// (ms) of their next delivery attempt; the retry worker leases from it.
const NotificationsDue = Prefix + "{notify}:due"

// NotificationsLog is the Redis stream of accepted notifications and their
// delivery outcomes.
const NotificationsLog = Prefix + "{notify}:log"

// Inbox is the Redis stream of the notifications delivered to an agent
// hosted here (NOTIFY to an Agent-ID), oldest first.
func Inbox(agentID string) string { return tag(agentID) + ":inbox" }

// InboxSeen marks a notification_id of one sender as delivered to an
// agent, so that a relayed delivery that arrives again is not delivered
// twice (receiver-side de-duplication). It shares the agent's tag, so the
// check and the append are one script on one slot.
func InboxSeen(agentID, senderAgentID, notificationID string) string {
	sum := sha256.Sum256([]byte(senderAgentID + "\x00" + notificationID))
	return tag(agentID) + ":inbox:seen:" + hex.EncodeToString(sum[:16])
}

// AGP binding keys (docs/agp.md). API keys are few and managed by an
// operator, so they share one hash tag: creating or revoking a key updates
// the key record and the index in one transaction.

// AGPKey is an API key record (a hash: id, label, agent_id, scopes,
// created), found by the SHA-256 (hex) of the key's secret.
func AGPKey(secretSHA256 string) string { return Prefix + "{agpkeys}:key:" + secretSHA256 }

// AGPKeyIndex maps an API key's id to the SHA-256 of its secret (a hash).
const AGPKeyIndex = Prefix + "{agpkeys}:index"

// AGPKeyEvents is the pub/sub channel of API key changes (revocations and
// replacements): every policysvc replica subscribes and streams them to
// its WatchKeyEvents watchers. A channel is not a key, so classic pub/sub
// reaches every node of a Redis Cluster; the change and its PUBLISH run in
// one script on the {agpkeys} slot.
const AGPKeyEvents = Prefix + "events:agpkeys"

// AGPConfirmation is an execute confirmation token of one caller (a hash:
// business, request, expires), under the caller's tag so one script checks
// and consumes it. token is a server-minted UUID, checked before use.
func AGPConfirmation(agentID, token string) string { return tag(agentID) + ":agp:confirm:" + token }

// AGPTransaction is one AGP transaction record of its owner (JSON).
// transactionID is a server-minted UUID, checked before use; keying by
// owner makes another caller's lookup a plain miss.
func AGPTransaction(agentID, transactionID string) string {
	return tag(agentID) + ":agp:tx:" + transactionID
}

// MONITOR subscriptions (standard methods §8.3, docs/mechanics.md). A
// subscription lives under its target's tag, so the event that finds a
// target's subscriptions and the scripts that change them run on one slot.

// MonitorSubscription is one subscription on a target agent (JSON).
// subscriptionID is server-minted.
func MonitorSubscription(targetAgentID, subscriptionID string) string {
	return tag(targetAgentID) + ":monitor:sub:" + subscriptionID
}

// MonitorIndex is a sorted set of the subscription ids on a target agent,
// scored by their expiry (Unix ms).
func MonitorIndex(targetAgentID string) string { return tag(targetAgentID) + ":monitor:index" }

// MonitorState is the last lifecycle status and revision of a monitored
// agent that MONITOR deliveries saw (a hash: status, revision).
func MonitorState(targetAgentID string) string { return tag(targetAgentID) + ":monitor:state" }

// MonitorEvent is the lifecycle event name given to one revision of a
// monitored agent, so that every policysvc replica names it alike.
func MonitorEvent(targetAgentID, revision string) string {
	return tag(targetAgentID) + ":monitor:event:" + revision
}

// MonitorOwned is a sorted set of one subscriber's subscriptions, members
// "<subscription_id>|<target_agent_id>", scored by expiry (Unix ms).
func MonitorOwned(subscriberAgentID string) string { return tag(subscriberAgentID) + ":monitor:owned" }

// ConsoleSession is an operator console session (a hash: person, csrf,
// created, seen), named by the SHA-256 of its session ID so that a read
// of Redis yields no usable cookie; it expires at the absolute timeout.
func ConsoleSession(idHash string) string { return Prefix + "{console}:session:" + idHash }

// ConsoleSignInLink is the person of an unused one-time console sign-in
// link, named by the SHA-256 of its token; redeeming deletes it.
func ConsoleSignInLink(tokenHash string) string { return Prefix + "{console}:link:" + tokenHash }
