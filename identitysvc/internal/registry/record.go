package registry

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
)

// Fields of the agent hash (rediskeys.Agent). Times are Unix
// milliseconds. Everything ResolveAgent needs is denormalised here at
// registration, so resolving an agent is one HMGET and never parses the
// Genesis.
const (
	fGenesis      = "genesis"       // the Genesis exactly as registered
	fName         = "name"          // the label (Form 3/4 agent-name)
	fStatus       = "status"        // pending|active|suspended|deprecated|retired
	fRevision     = "revision"      // +1 on every change
	fHistory      = "history"       // "1" once a lifecycle event was signed
	fOwner        = "owner"         //
	fArchetype    = "archetype"     //
	fZone         = "zone"          // governance_zone
	fScopes       = "scopes"        // JSON array of scope tokens
	fTier         = "tier"          //
	fPath         = "path"          // effective verification path
	fWarning      = "warning"       // trust warning token
	fIssuerFP     = "issuer_fp"     // Genesis-issuer fingerprint
	fIssuerKey    = "issuer_key"    // Genesis issuer_public_key, base64url
	fOrgDomain    = "org_domain"    //
	fIssuedAt     = "issued_at"     // Genesis issued_at
	fRegisteredAt = "registered_at" //
	fUpdatedAt    = "updated_at"    //
	fActivatedAt  = "activated_at"  // last transition into active
	fRevokedAt    = "revoked_at"    //
	fSuccessor    = "successor"     // successor_agent_id of DEPRECATE
	fDeadline     = "deadline"      // migration_deadline of DEPRECATE
	fLastMethod   = "last_method"   // last lifecycle method that changed state
	fLastMethodAt = "last_method_at"
	fRole         = "role"
	// fRegistration is a random token of the Register call that stored
	// the record, so that a resend of its create script, or a read after
	// an error, recognises that call's record (createScript).
	fRegistration = "registration"
)

// recordFields is what ResolveAgent reads: everything but the Genesis.
var recordFields = []string{
	fName, fStatus, fRevision, fHistory, fOwner, fArchetype, fZone, fScopes, fTier, fPath, fWarning,
	fIssuerFP, fIssuerKey, fOrgDomain, fIssuedAt, fRegisteredAt, fUpdatedAt, fActivatedAt, fRevokedAt, fSuccessor,
	fDeadline, fLastMethod, fLastMethodAt, fRole,
}

// Agent is the registry's full view of one agent: the wire record plus
// what the documents need.
type Agent struct {
	Record       *identityv1.AgentRecord
	History      bool
	OrgDomain    string
	RegisteredAt time.Time
	ActivatedAt  time.Time
	Deadline     time.Time
	LastMethod   string
	LastMethodAt time.Time
}

// statusFromName is the inverse of callerpolicy.StateName for stored
// values.
func statusFromName(s string) identityv1.AgentStatus {
	st, _ := callerpolicy.ParseState(s)
	return st
}

func msTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func msString(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// agentFromValues builds an Agent from HMGET values in recordFields order.
// It returns nil when the agent does not exist.
func agentFromValues(agentID string, vals []any) *Agent {
	get := func(i int) string {
		s, _ := vals[i].(string)
		return s
	}
	m := make(map[string]string, len(recordFields))
	for i, f := range recordFields {
		m[f] = get(i)
	}
	if m[fStatus] == "" {
		return nil
	}
	return agentFromMap(agentID, m)
}

func agentFromMap(agentID string, m map[string]string) *Agent {
	var scopes []string
	_ = json.Unmarshal([]byte(m[fScopes]), &scopes)
	tier, _ := strconv.Atoi(m[fTier])
	rev, _ := strconv.ParseUint(m[fRevision], 10, 64)
	issued, _ := time.Parse(time.RFC3339Nano, m[fIssuedAt])
	wild := false
	for _, s := range scopes {
		if strings.Contains(s, "*") {
			wild = true
			break
		}
	}
	rec := &identityv1.AgentRecord{
		AgentId:           agentID,
		Name:              m[fName],
		Status:            statusFromName(m[fStatus]),
		Owner:             m[fOwner],
		OwnerId:           ownerID(m[fOwner], m[fOrgDomain]),
		Scopes:            scopes,
		TrustTier:         int32(tier),
		VerificationPath:  m[fPath],
		TrustWarning:      m[fWarning],
		IssuerFingerprint: m[fIssuerFP],
		IssuerPublicKey:   issuerKey(m[fIssuerKey]),
		Archetype:         m[fArchetype],
		GovernanceZone:    m[fZone],
		SuccessorAgentId:  m[fSuccessor],
		IssuedAt:          ts(issued),
		UpdatedAt:         ts(msTime(m[fUpdatedAt])),
		RevokedAt:         ts(msTime(m[fRevokedAt])),
		Wildcards:         wild,
		Role:              m[fRole],
		Revision:          rev,
	}
	return &Agent{
		Record:       rec,
		History:      m[fHistory] == "1",
		OrgDomain:    m[fOrgDomain],
		RegisteredAt: msTime(m[fRegisteredAt]),
		ActivatedAt:  msTime(m[fActivatedAt]),
		Deadline:     msTime(m[fDeadline]),
		LastMethod:   m[fLastMethod],
		LastMethodAt: msTime(m[fLastMethodAt]),
	}
}

// issuerKey decodes the stored issuer key; a record without one (or with
// a damaged one) has none, and issuer-signed Agent Certificates of that
// agent do not verify.
func issuerKey(s string) []byte {
	k, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil
	}
	return k
}

// ownerID is the machine-readable principal: the organisation's domain
// when the Genesis names one, else the owner itself (core §6.3.3 owner_id
// precedence: explicit, then Genesis-derived).
func ownerID(owner, orgDomain string) string {
	if orgDomain != "" {
		return orgDomain
	}
	return owner
}

// newAgentFields are the hash fields of a freshly registered Genesis.
func newAgentFields(g *genesis.Genesis, name string, now time.Time) []any {
	scopes, _ := json.Marshal(g.Scope)
	return []any{
		fGenesis, string(g.Bytes()),
		fName, name,
		fStatus, callerpolicy.StatePending,
		fRevision, "1",
		fHistory, "0",
		fOwner, g.Owner,
		fArchetype, string(g.Archetype),
		fZone, g.GovernanceZone,
		fScopes, string(scopes),
		fTier, strconv.Itoa(g.TrustTier),
		fPath, string(g.EffectivePath()),
		fWarning, g.TrustWarning(),
		fIssuerFP, g.IssuerFingerprint(),
		fIssuerKey, genesis.EncodeKey(g.IssuerPublicKey),
		fOrgDomain, g.OrgDomain,
		fIssuedAt, g.IssuedAt.UTC().Format(time.RFC3339Nano),
		fRegisteredAt, msString(now),
		fUpdatedAt, msString(now),
		fRole, "agent",
	}
}

// pairsToMap turns HSET-style field/value pairs into a map.
func pairsToMap(pairs []any) map[string]string {
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i].(string)] = pairs[i+1].(string)
	}
	return m
}
