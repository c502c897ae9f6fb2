package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// snapshot is the snapshot without its version fields.
func (d *Draft) snapshot() *catalogv1.Snapshot {
	s := &catalogv1.Snapshot{
		CatalogVersion: d.cfg.Catalog.Version,
		Methods:        d.cfg.Catalog.Proto(d.pol.Custom),
		MethodPolicy:   d.pol.Proto,
		Policies: &catalogv1.ManifestPolicies{
			WildcardsAccepted:          d.service.Toggles.WildcardsAccepted,
			AnonymousDiscovery:         d.service.Toggles.AnonymousDiscovery,
			ScopeRequiredForInvocation: d.service.Toggles.ScopeRequiredForInvocation,
			SynthesisEnabled:           d.service.Toggles.SynthesisEnabled,
			MaxSynthesisDepth:          uint32(d.service.Toggles.MaxSynthesisDepth),
		},
	}
	for _, e := range d.entries {
		s.Endpoints = append(s.Endpoints, e.ep.Proto(e.tier))
	}
	return s
}

func orEmpty(a []any) []any {
	if a == nil {
		return []any{}
	}
	return a
}

func (d *Draft) manifestBase() map[string]any {
	mi := d.cfg.Manifest
	t := d.service.Toggles
	var domain any
	if mi.Domain != "" {
		domain = mi.Domain
	}
	var notice any
	if mi.AgentDisclosureNotice != "" {
		notice = mi.AgentDisclosureNotice
	}
	hosted := orEmpty(mi.HostedAgents)
	if mi.AgentDisclosure == "private" {
		hosted = []any{}
	}
	features := mi.SupportedFeatures
	if features == nil {
		features = []string{}
	}
	eps := make([]any, 0, len(d.entries))
	for _, e := range d.entries {
		eps = append(eps, e.ep.Projection())
	}
	doc := map[string]any{
		"agtp_version":               mi.AgtpVersion,
		"agtp_api_version":           mi.AgtpAPIVersion,
		"catalog_version":            d.cfg.Catalog.Version,
		"catalog_versions_supported": []string{d.cfg.Catalog.Version},
		"server": map[string]any{
			"server_id":          mi.ServerID,
			"domain":             domain,
			"operator":           mi.Operator,
			"contact":            mi.Contact,
			"supported_features": features,
		},
		"embedded_methods":        agtp.FloorMethods(),
		"endpoints":               eps,
		"agent_disclosure":        mi.AgentDisclosure,
		"hosted_agents":           hosted,
		"agent_disclosure_notice": notice,
		"apis":                    orEmpty(mi.APIs),
		"hosted_protocols":        orEmpty(mi.HostedProtocols),
		"policies": map[string]any{
			"wildcards_accepted":            t.WildcardsAccepted,
			"anonymous_discovery":           t.AnonymousDiscovery,
			"scope_required_for_invocation": t.ScopeRequiredForInvocation,
			"synthesis_enabled":             t.SynthesisEnabled,
			"max_synthesis_depth":           t.MaxSynthesisDepth,
			"methods":                       d.pol.Manifest,
		},
	}
	if len(d.pol.Custom) > 0 {
		doc["custom_methods"] = d.pol.Custom
	}
	if d.service.Vocabulary != nil {
		doc["vocabulary"] = d.service.Vocabulary
	}
	if d.service.DataManifest != nil {
		doc["data_manifest"] = d.service.DataManifest
	}
	return doc
}

func (d *Draft) contentHash() (string, error) {
	defs := make([]any, 0, len(d.entries))
	for _, e := range d.entries {
		defs = append(defs, map[string]any{"tier": int(e.tier), "definition": json.RawMessage(e.ep.JSON)})
	}
	b, err := jcs.Marshal(map[string]any{"manifest": d.base, "definitions": defs, "methods": d.snapshot().GetMethods()})
	if err != nil {
		return "", fmt.Errorf("registry: content hash: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Version is what the version counter hands out for a content hash.
type Version struct {
	Counter uint64
	Updated time.Time
	Issued  time.Time
}

// APIVersion renders the AGTP-API-Version header value for a counter:
// the AGTP-API version the server implements with the counter as the
// last component, so it reads as the spec version (AGTP-API §17.4) and
// strictly increases with every change (core §7.6.7).
func APIVersion(agtpAPIVersion string, counter uint64) string {
	return fmt.Sprintf("%s.%d", agtpAPIVersion, counter)
}

// State is a published configuration.
type State struct {
	Snapshot  *catalogv1.Snapshot
	Table     *route.Table
	Manifest  []byte
	ETag      string
	Endpoints []*endpoint.Endpoint
	Draft     *Draft
}

// Finalize stamps the version onto the draft, signs the manifest and
// builds the route table.
func (d *Draft) Finalize(v Version, signer *manifest.Signer) (*State, error) {
	doc := cloneMap(d.base)
	server := cloneMap(doc["server"].(map[string]any))
	server["issued"] = v.Issued.UTC().Format(time.RFC3339)
	server["updated"] = v.Updated.UTC().Format(time.RFC3339)
	doc["server"] = server
	docVersion := d.cfg.Manifest.DocumentVersionPrefix + fmt.Sprint(v.Counter)
	doc["document_version"] = docVersion
	body, err := manifest.Finish(doc, signer)
	if err != nil {
		return nil, err
	}
	snap := d.snapshot()
	snap.Revision = v.Counter
	snap.ApiVersion = APIVersion(d.cfg.Manifest.AgtpAPIVersion, v.Counter)
	snap.UpdatedAt = timestamppb.New(v.Updated)
	//lint:ignore SA1019 the first release's field, filled for its clients beside Manifest
	snap.ManifestJson = body
	snap.Manifest = string(body)
	snap.DocumentVersion = docVersion
	snap.ManifestEtag = manifest.ETag(body)
	tb, err := route.New(snap)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	st := &State{Snapshot: snap, Table: tb, Manifest: body, ETag: snap.ManifestEtag, Draft: d}
	for _, e := range d.entries {
		st.Endpoints = append(st.Endpoints, e.ep)
	}
	return st, nil
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
