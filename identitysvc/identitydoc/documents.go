package identitydoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Media types. Identity documents are served as
// application/vnd.agtp.identity+json
// (docs/decisions.md#D-identity-media-type); the other variants as
// application/vnd.agtp+json (core §6.1.7).
const (
	MediaTypeIdentity = "application/vnd.agtp.identity+json"
	MediaTypeAGTP     = "application/vnd.agtp+json"
)

// Document type values.
const (
	TypeIdentity  = "agtp-identity"
	TypeStatus    = "agtp-status"
	TypeNamespace = "agtp-namespace"
)

// TrustExplanationTier2 accompanies the Tier 2 trust warning (core §6.3.3:
// trust_explanation is required whenever trust_warning is present).
const TrustExplanationTier2 = "The agent's organisational affiliation is asserted by its issuer (verification path org-asserted) and has not been verified through DNS or a transparency log."

// Params are the registry-wide values of the documents.
type Params struct {
	// AGTPVersion is agtp_version (docs/decisions.md#D-agtp-version: as
	// configured).
	AGTPVersion string
	// DocumentVersion is the identity document schema version.
	DocumentVersion string
	// IssuerURL is the identity document's issuer.
	IssuerURL string
	// Methods are every method the server accepts; the 18 floor methods
	// are always included.
	Methods []string
	// TrustScore is trust_score in [0, 1] (its computation belongs to
	// AGTP-TRUST; this suite serves a configured value).
	TrustScore float64
	// OrgDomain and GovernanceZone describe the namespace; OrgDomain also
	// makes the Form 3 manifest_uri of namespace entries.
	OrgDomain      string
	GovernanceZone string
}

// Agent is what the documents are built from.
type Agent struct {
	Record *identityv1.AgentRecord
	// Genesis is required for identity documents.
	Genesis           *genesis.Genesis
	ActivatedAt       time.Time
	MigrationDeadline time.Time
	LastMethod        string
	LastMethodAt      time.Time
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// MethodList returns the floor methods followed by the extra ones, without
// duplicates.
func MethodList(extra []string) []string {
	out := agtp.FloorMethods()
	for _, m := range extra {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Identity builds the unsigned Agent Identity Document (core §6.3.3): the
// 16 required members, the recommended ones the registry knows (with
// delegation_permitted and max_delegation_depth from the Genesis), the
// conditional trust_warning/trust_explanation, and the deprecation or
// revocation signal of §6.1.8.1 step 3.
func Identity(a Agent, p Params) (map[string]any, error) {
	if a.Genesis == nil || a.Record == nil {
		return nil, errors.New("identitydoc: identity document needs the record and the Genesis")
	}
	rec, g := a.Record, a.Genesis
	issued := g.IssuedAt
	updated := rec.GetUpdatedAt().AsTime()
	if updated.Before(issued) {
		updated = issued
	}
	methods := make([]any, 0)
	for _, m := range MethodList(p.Methods) {
		methods = append(methods, m)
	}
	scopes := make([]any, len(g.Scope))
	var caps []any
	seen := map[string]bool{}
	for i, s := range g.Scope {
		scopes[i] = s
		if d := agtp.Scope(s).Domain(); d != "*" && !seen[d] {
			seen[d] = true
			caps = append(caps, d)
		}
	}
	if caps == nil {
		caps = []any{}
	}
	doc := map[string]any{
		"agtp_version":               p.AGTPVersion,
		"document_type":              TypeIdentity,
		"document_version":           p.DocumentVersion,
		"agent_id":                   rec.GetAgentId(),
		"name":                       rec.GetName(),
		"description":                Description(rec),
		"principal":                  g.Owner,
		"principal_id":               rec.GetOwnerId(),
		"issuer":                     p.IssuerURL,
		"issued_at":                  rfc3339(issued),
		"updated_at":                 rfc3339(updated),
		"status":                     callerpolicy.StateName(rec.GetStatus()),
		"methods":                    methods,
		"capabilities":               caps,
		"scopes_accepted":            scopes,
		"trust_score":                p.TrustScore,
		"trust_tier":                 float64(g.TrustTier),
		"owner_id":                   rec.GetOwnerId(),
		"role":                       "agent",
		"governance_zone":            g.GovernanceZone,
		"archetype":                  string(g.Archetype),
		"genesis_issuer_fingerprint": g.IssuerFingerprint(),
		// Whether the agent takes work a DELEGATE hands it, as its
		// issuer stated in the Genesis; false when it did not
		// (docs/decisions.md#D-delegation-consent).
		"delegation_permitted": g.DelegationPermitted,
	}
	if d := g.MaxDelegationDepth; d != nil {
		doc["max_delegation_depth"] = float64(*d)
	}
	if path := g.EffectivePath(); path != "" {
		doc["verification_path"] = string(path)
	}
	if g.OrgDomain != "" {
		doc["org_domain"] = g.OrgDomain
	}
	if g.PackageRef != "" {
		doc["package_ref"] = g.PackageRef
	}
	if len(g.LogInclusionProof) > 0 {
		var v any
		if err := json.Unmarshal(g.LogInclusionProof, &v); err == nil {
			doc["log_inclusion_proof"] = v
		}
	}
	if w := g.TrustWarning(); w != "" {
		doc["trust_warning"] = w
		doc["trust_explanation"] = TrustExplanationTier2
	}
	addLifecycleSignal(doc, a)
	return doc, nil
}

// addLifecycleSignal carries the deprecation signal (successor and
// migration deadline) and the revocation time.
func addLifecycleSignal(doc map[string]any, a Agent) {
	switch a.Record.GetStatus() {
	case identityv1.AgentStatus_AGENT_STATUS_DEPRECATED:
		doc["deprecated"] = true
		if s := a.Record.GetSuccessorAgentId(); s != "" {
			doc["successor_agent_id"] = s
		}
		if !a.MigrationDeadline.IsZero() {
			doc["migration_deadline"] = rfc3339(a.MigrationDeadline)
		}
	case identityv1.AgentStatus_AGENT_STATUS_RETIRED:
		if t := a.Record.GetRevokedAt(); t != nil {
			doc["revoked_at"] = rfc3339(t.AsTime())
		}
	}
}

// Description is an agent's one-line description, the same in its identity
// document and in the DISCOVER /agents listing (core §7.2.2).
func Description(rec *identityv1.AgentRecord) string {
	return "AGTP agent " + rec.GetName() + " (" + rec.GetArchetype() + ") governed by " + rec.GetOwner() + "."
}

// Status builds the unsigned status document (core §6.4.4), which is also
// the ?format=status variant. Lifecycle state is lowercase
// (docs/decisions.md#D-lowercase-states); last_action_* is the last
// lifecycle method that changed the state, the one action the registry sees.
// active_session_count is left out: it needs observability rights the
// registry cannot check.
func Status(a Agent, p Params, now time.Time) map[string]any {
	rec := a.Record
	doc := map[string]any{
		"document_type":   TypeStatus,
		"canonical_id":    rec.GetAgentId(),
		"agent_label":     rec.GetName(),
		"lifecycle_state": callerpolicy.StateName(rec.GetStatus()),
		"generated_at":    rfc3339(now),
	}
	orgDomain := p.OrgDomain
	if a.Genesis != nil && a.Genesis.OrgDomain != "" {
		orgDomain = a.Genesis.OrgDomain
	}
	if orgDomain != "" {
		doc["org_domain"] = orgDomain
	}
	if a.LastMethod != "" {
		doc["last_action_method"] = a.LastMethod
		doc["last_action_timestamp"] = rfc3339(a.LastMethodAt)
	}
	addLifecycleSignal(doc, a)
	return doc
}

// Namespace builds the unsigned Agent Namespace Document (core §6.2.2):
// active agents only, total_active equal to their count, generated_at.
func Namespace(agents []Agent, p Params, now time.Time) map[string]any {
	entries := make([]any, 0, len(agents))
	for _, a := range agents {
		rec := a.Record
		if rec.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE {
			continue
		}
		e := map[string]any{
			"agent_label":     rec.GetName(),
			"canonical_id":    rec.GetAgentId(),
			"lifecycle_state": callerpolicy.StateActive,
			"trust_tier":      float64(rec.GetTrustTier()),
			"manifest_uri":    ManifestURI(rec, p.OrgDomain),
			"last_updated":    rfc3339(rec.GetUpdatedAt().AsTime()),
		}
		if !a.ActivatedAt.IsZero() {
			e["activated_at"] = rfc3339(a.ActivatedAt)
		}
		entries = append(entries, e)
	}
	doc := map[string]any{
		"document_type":  TypeNamespace,
		"schema_version": "1.0",
		"generated_at":   rfc3339(now),
		"agents":         entries,
		"total_active":   float64(len(entries)),
	}
	if p.OrgDomain != "" {
		doc["org_domain"] = p.OrgDomain
	}
	if p.GovernanceZone != "" {
		doc["governance_zone"] = p.GovernanceZone
	}
	return doc
}

// ManifestURI is where an agent's identity document resolves: Form 3
// under the organisation's domain when there is one, else Form 1.
func ManifestURI(rec *identityv1.AgentRecord, orgDomain string) string {
	if orgDomain != "" {
		return "agtp://" + orgDomain + "/agents/" + rec.GetName()
	}
	return "agtp://" + rec.GetAgentId()
}

func jsonIndent(w io.Writer, canonical []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, canonical, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
