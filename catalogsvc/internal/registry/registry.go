// Package registry assembles one consistent configuration of the contract
// layer: the catalog, the method policy, the built-in, file and runtime
// endpoints, the service document (_service file), the route table, the
// manifest and the snapshot the front door routes from.
//
// Build validates everything and fails as a whole: a configuration with
// one bad file is never published, so the previous one keeps serving.
package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/builtin"
	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/internal/policy"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// Toggles are the manifest's policies toggles (AGTP-API §8.7).
type Toggles struct {
	WildcardsAccepted          bool
	AnonymousDiscovery         bool
	ScopeRequiredForInvocation bool
	SynthesisEnabled           bool
	MaxSynthesisDepth          int
}

// DefaultToggles are the draft's defaults (§8.2 example, §8.7, §18),
// except scope_required_for_invocation, which defaults to false: core
// §5.5.3 lets a request without Authority-Scope inherit the identity
// document's scopes (core assertion 54), and the front door enforces
// the toggle when an operator sets it (docs/catalogsvc.md).
func DefaultToggles() Toggles {
	return Toggles{AnonymousDiscovery: true, ScopeRequiredForInvocation: false, SynthesisEnabled: true, MaxSynthesisDepth: 10}
}

// ManifestInfo are the manifest fields the operator configures (§8.2-§8.6).
type ManifestInfo struct {
	AgtpVersion           string
	AgtpAPIVersion        string
	ServerID              string
	Domain                string
	Operator              string
	Contact               string
	SupportedFeatures     []string
	AgentDisclosure       string
	HostedAgents          []any
	AgentDisclosureNotice string
	APIs                  []any
	HostedProtocols       []any
	// DocumentVersionPrefix is put before the version counter in
	// document_version ("v" gives "v7").
	DocumentVersionPrefix string
}

// Service is the service-level configuration: the options, overlaid by
// the endpoints directory's _service file when there is one.
type Service struct {
	Methods          policy.Methods
	Toggles          Toggles
	Vocabulary       *Vocabulary
	DataManifest     *DataManifest
	BuiltinOverrides []string
}

// Vocabulary is the AGIS vocabulary block (AGIS §8.2), optional.
type Vocabulary struct {
	DeclaredVerbs []string `json:"declared_verbs"`
	Domain        string   `json:"domain,omitempty"`
	Namespace     string   `json:"namespace,omitempty"`
	Version       string   `json:"version,omitempty"`
	Negotiable    bool     `json:"negotiable,omitempty"`
}

// DataManifest is the AGIS data manifest (AGIS §8.3): the data classes a
// negotiable service holds. Its members are fixed so that nothing that
// must not be public (record counts, schemas, field names) can be put in
// a document that anonymous callers read (AGIS §13; companions
// assertion 16).
type DataManifest struct {
	AvailableData    []DataClass `json:"available_data"`
	PreAuthDiscovery bool        `json:"pre_auth_discovery"`
}

// DataClass is one available data class.
type DataClass struct {
	Class                 string   `json:"class"`
	Description           string   `json:"description,omitempty"`
	Formats               []string `json:"formats,omitempty"`
	Sensitivity           string   `json:"sensitivity,omitempty"`
	RequiresAuthorization bool     `json:"requires_authorization,omitempty"`
}

// Config is the fixed input of Build.
type Config struct {
	Catalog   *catalog.Catalog
	Service   Service
	Manifest  ManifestInfo
	Functions func(string) bool
	Recipes   func(string) bool
	LookupEnv func(string) (string, bool)
}

// File is one file of the endpoints directory.
type File struct {
	Name string
	Data []byte
}

// Runtime is an endpoint registered through the admin API; Deleted is a
// tombstone that hides a file or built-in endpoint of the same key.
type Runtime struct {
	Key        string                 `json:"key"`
	Tier       catalogv1.EndpointTier `json:"tier"`
	Definition json.RawMessage        `json:"definition,omitempty"`
	Deleted    bool                   `json:"deleted,omitempty"`
}

// ServiceFileNames are the names of the service document in the
// endpoints directory.
var ServiceFileNames = []string{"_service.yaml", "_service.yml", "_service.json"}

// IsDefinitionFile reports whether a directory entry is read at all.
func IsDefinitionFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return !strings.HasPrefix(path.Base(name), ".")
	}
	return false
}

type entry struct {
	ep     *endpoint.Endpoint
	tier   catalogv1.EndpointTier
	origin string
}

// Draft is a validated configuration waiting for its version.
type Draft struct {
	cfg      Config
	service  Service
	pol      *policy.Resolved
	entries  []entry
	warnings []string
	base     map[string]any
	baseKeys map[string]bool
	// ContentHash identifies the configuration: two replicas with the same
	// hash publish the same manifest.
	ContentHash string
}

// Warnings are the findings that did not refuse the configuration.
func (d *Draft) Warnings() []string { return d.warnings }

// Build validates a configuration. files is the endpoints directory (may
// be nil), runtime the admin API's endpoints (may be nil).
func Build(cfg Config, files []File, runtime []Runtime) (*Draft, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("registry: no catalog")
	}
	d := &Draft{cfg: cfg, service: cfg.Service}
	d.warnings = append(d.warnings, cfg.Catalog.Warnings...)
	var errs []error

	var defFiles []File
	for _, f := range files {
		if slices.Contains(ServiceFileNames, path.Base(f.Name)) {
			if err := d.applyServiceFile(f); err != nil {
				return nil, err
			}
			continue
		}
		defFiles = append(defFiles, f)
	}
	if err := d.checkService(); err != nil {
		return nil, err
	}
	pol, err := policy.Resolve(d.service.Methods, cfg.Catalog)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	d.pol = pol
	d.warnings = append(d.warnings, pol.Warnings...)

	verbs := route.VerbSet{}
	for _, v := range cfg.Catalog.Verbs() {
		verbs[v.Name] = struct{}{}
	}
	for _, c := range pol.Custom {
		verbs[c] = struct{}{}
	}
	for _, l := range pol.Proto.GetLegacy() {
		verbs[l] = struct{}{}
	}
	ctx := endpoint.Context{
		Method: func(m string) ([]string, bool) {
			if v, ok := cfg.Catalog.Lookup(m); ok {
				return v.Categories, true
			}
			return nil, slices.Contains(pol.Custom, m)
		},
		Verbs:             verbs,
		Functions:         cfg.Functions,
		Recipes:           cfg.Recipes,
		LookupEnv:         cfg.LookupEnv,
		InheritCapability: true,
		AllowReserved:     func(p string) bool { return slices.Contains(d.service.BuiltinOverrides, p) },
	}
	byKey := map[string]int{}
	put := func(e entry) {
		k := e.ep.Def.Key()
		if i, ok := byKey[k]; ok {
			d.entries[i] = e
			return
		}
		byKey[k] = len(d.entries)
		d.entries = append(d.entries, e)
	}

	// Built-ins (Tier A).
	bctx := ctx
	bctx.Functions = nil
	bctx.AllowReserved = func(string) bool { return true }
	builtins, err := endpoint.ParseAndCompile("builtin", builtin.Definitions, endpoint.FormatJSON, bctx)
	if err != nil {
		return nil, fmt.Errorf("registry: built-in endpoints: %w", err)
	}
	for _, ep := range builtins {
		ep.Def.Anonymous = d.service.Toggles.AnonymousDiscovery && ep.Def.Path != "/contracts"
		ep.JSON, _ = json.Marshal(ep.Def)
		put(entry{ep: ep, tier: catalogv1.EndpointTier_ENDPOINT_TIER_A, origin: "built-in"})
	}

	// Files (Tier B). Every file is checked so that one run reports every
	// broken file.
	sort.Slice(defFiles, func(i, j int) bool { return defFiles[i].Name < defFiles[j].Name })
	fileOrigin := map[string]string{}
	for _, f := range defFiles {
		eps, err := endpoint.ParseAndCompile(f.Name, f.Data, endpoint.FormatAuto, ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ep := range eps {
			k := ep.Def.Key()
			if prev, dup := fileOrigin[k]; dup {
				errs = append(errs, &endpoint.FieldError{File: f.Name, Field: "path", Rule: "duplicate-endpoint", Msg: fmt.Sprintf("%s is also defined in %s", k, prev)})
				continue
			}
			fileOrigin[k] = f.Name
			tier := catalogv1.EndpointTier_ENDPOINT_TIER_B
			if i, ok := byKey[k]; ok && d.entries[i].tier == catalogv1.EndpointTier_ENDPOINT_TIER_A {
				// An operator override of a built-in keeps its slot.
				tier = catalogv1.EndpointTier_ENDPOINT_TIER_A
			}
			d.warnings = append(d.warnings, prefixed(f.Name+": "+k, ep.Warnings)...)
			put(entry{ep: ep, tier: tier, origin: f.Name})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	d.baseKeys = make(map[string]bool, len(byKey))
	for k := range byKey {
		d.baseKeys[k] = true
	}

	// Runtime endpoints: registered through the admin API and validated
	// then; one that no longer passes (say its verb left the catalog) is
	// refused here and logged, not fatal (AGTP-API §4.5, §13.2).
	sort.Slice(runtime, func(i, j int) bool { return runtime[i].Key < runtime[j].Key })
	for _, r := range runtime {
		if r.Deleted {
			if i, ok := byKey[r.Key]; ok {
				d.entries = slices.Delete(d.entries, i, i+1)
				byKey = map[string]int{}
				for j, e := range d.entries {
					byKey[e.ep.Def.Key()] = j
				}
			}
			continue
		}
		ep, err := CompileRuntime(ctx, r.Definition)
		if err != nil {
			d.warnings = append(d.warnings, fmt.Sprintf("runtime endpoint %s refused: %v", r.Key, err))
			continue
		}
		tier := r.Tier
		if tier == catalogv1.EndpointTier_ENDPOINT_TIER_UNSPECIFIED {
			tier = catalogv1.EndpointTier_ENDPOINT_TIER_B
		}
		put(entry{ep: ep, tier: tier, origin: "runtime"})
	}
	if err := d.checkVocabulary(); err != nil {
		return nil, err
	}
	sort.SliceStable(d.entries, func(i, j int) bool {
		a, b := d.entries[i].ep.Def, d.entries[j].ep.Def
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Method < b.Method
	})
	// The route table is the last word on consistency (ambiguous
	// templates, duplicate routes): build it once now.
	if _, err := route.New(d.snapshot()); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	d.base = d.manifestBase()
	hash, err := d.contentHash()
	if err != nil {
		return nil, err
	}
	d.ContentHash = hash
	return d, nil
}

// CompileRuntime validates one admin-API definition against the same
// context as the files.
func CompileRuntime(ctx endpoint.Context, def []byte) (*endpoint.Endpoint, error) {
	srcs, err := endpoint.Parse("definition_json", def, endpoint.FormatJSON)
	if err != nil {
		return nil, err
	}
	if len(srcs) != 1 {
		return nil, errors.New("one endpoint definition per request")
	}
	return endpoint.Compile(srcs[0], ctx)
}

// Context returns the validation context of this configuration, for the
// admin API to check a definition before storing it.
func (d *Draft) Context() endpoint.Context {
	verbs := route.VerbSet{}
	for _, v := range d.cfg.Catalog.Verbs() {
		verbs[v.Name] = struct{}{}
	}
	for _, c := range d.pol.Custom {
		verbs[c] = struct{}{}
	}
	for _, l := range d.pol.Proto.GetLegacy() {
		verbs[l] = struct{}{}
	}
	return endpoint.Context{
		Method: func(m string) ([]string, bool) {
			if v, ok := d.cfg.Catalog.Lookup(m); ok {
				return v.Categories, true
			}
			return nil, slices.Contains(d.pol.Custom, m)
		},
		Verbs:             verbs,
		Functions:         d.cfg.Functions,
		Recipes:           d.cfg.Recipes,
		LookupEnv:         d.cfg.LookupEnv,
		InheritCapability: true,
		AllowReserved:     func(p string) bool { return slices.Contains(d.service.BuiltinOverrides, p) },
	}
}

// Origin returns where the endpoint with key comes from ("built-in", a
// file name, "runtime"), or "".
func (d *Draft) Origin(key string) string {
	for _, e := range d.entries {
		if e.ep.Def.Key() == key {
			return e.origin
		}
	}
	return ""
}

// IsBase reports whether key is defined by a built-in or a file, so that
// removing it needs a tombstone rather than forgetting a runtime entry.
func (d *Draft) IsBase(key string) bool { return d.baseKeys[key] }

func prefixed(p string, ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = p + ": " + w
	}
	return out
}

type serviceFile struct {
	Policies *struct {
		Methods                    *policy.Methods `json:"methods"`
		WildcardsAccepted          *bool           `json:"wildcards_accepted"`
		AnonymousDiscovery         *bool           `json:"anonymous_discovery"`
		ScopeRequiredForInvocation *bool           `json:"scope_required_for_invocation"`
		SynthesisEnabled           *bool           `json:"synthesis_enabled"`
		MaxSynthesisDepth          *int            `json:"max_synthesis_depth"`
	} `json:"policies"`
	Vocabulary   *Vocabulary   `json:"vocabulary"`
	DataManifest *DataManifest `json:"data_manifest"`
	Builtins     *struct {
		Overrides []string `json:"overrides"`
	} `json:"builtins"`
}

func (d *Draft) applyServiceFile(f File) error {
	v, err := endpoint.DecodeValue(f.Name, f.Data)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(v)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var sf serviceFile
	if err := dec.Decode(&sf); err != nil {
		return &endpoint.FieldError{File: f.Name, Rule: "service-document", Msg: err.Error()}
	}
	if p := sf.Policies; p != nil {
		if p.Methods != nil {
			d.service.Methods = *p.Methods
		}
		set := func(dst *bool, src *bool) {
			if src != nil {
				*dst = *src
			}
		}
		t := &d.service.Toggles
		set(&t.WildcardsAccepted, p.WildcardsAccepted)
		set(&t.AnonymousDiscovery, p.AnonymousDiscovery)
		set(&t.ScopeRequiredForInvocation, p.ScopeRequiredForInvocation)
		set(&t.SynthesisEnabled, p.SynthesisEnabled)
		if p.MaxSynthesisDepth != nil {
			t.MaxSynthesisDepth = *p.MaxSynthesisDepth
		}
	}
	if sf.Vocabulary != nil {
		d.service.Vocabulary = sf.Vocabulary
	}
	if sf.DataManifest != nil {
		d.service.DataManifest = sf.DataManifest
	}
	if sf.Builtins != nil {
		d.service.BuiltinOverrides = sf.Builtins.Overrides
	}
	return nil
}

func (d *Draft) checkService() error {
	s := d.service
	if s.Toggles.MaxSynthesisDepth < 1 {
		return &endpoint.FieldError{Field: "policies.max_synthesis_depth", Rule: "positive-integer", Msg: "must be a positive integer (AGTP-API §8.7)"}
	}
	for _, o := range s.BuiltinOverrides {
		if !slices.Contains(builtin.Paths, o) {
			return &endpoint.FieldError{Field: "builtins.overrides", Rule: "not-a-builtin", Msg: fmt.Sprintf("%s is not a built-in DISCOVER path", o)}
		}
	}
	if v := s.Vocabulary; v != nil && v.Negotiable && s.DataManifest == nil {
		return &endpoint.FieldError{Field: "vocabulary.negotiable", Rule: "data-manifest-required", Msg: "a negotiable service must publish a data_manifest (AGIS §8.2(e), §8.3)"}
	}
	if dm := s.DataManifest; dm != nil {
		for i, c := range dm.AvailableData {
			if c.Class == "" {
				return &endpoint.FieldError{Field: fmt.Sprintf("data_manifest.available_data[%d].class", i), Rule: "required", Msg: "each data class has a class name"}
			}
		}
		if dm.PreAuthDiscovery && !s.Toggles.AnonymousDiscovery {
			return &endpoint.FieldError{Field: "data_manifest.pre_auth_discovery", Rule: "pre-auth-discovery", Msg: "pre_auth_discovery needs policies.anonymous_discovery (AGIS §8.3)"}
		}
	}
	return nil
}

// checkVocabulary is AGIS pass 7: the declared verbs are exactly the
// verbs the operator's endpoints use (companions assertion 14).
func (d *Draft) checkVocabulary() error {
	v := d.service.Vocabulary
	if v == nil {
		return nil
	}
	used := map[string]bool{}
	for _, e := range d.entries {
		if e.tier == catalogv1.EndpointTier_ENDPOINT_TIER_B {
			used[e.ep.Def.Method] = true
		}
	}
	for _, m := range v.DeclaredVerbs {
		if !used[m] {
			return &endpoint.FieldError{Field: "vocabulary.declared_verbs", Rule: "vocabulary-integrity", Msg: fmt.Sprintf("%s is declared but no endpoint uses it (AGIS §8.2(b), pass 7)", m)}
		}
	}
	var missing []string
	for m := range used {
		if !slices.Contains(v.DeclaredVerbs, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return &endpoint.FieldError{Field: "vocabulary.declared_verbs", Rule: "vocabulary-integrity", Msg: fmt.Sprintf("%s used by an endpoint but not declared (AGIS §8.2(a), pass 7)", strings.Join(missing, ", "))}
	}
	return nil
}

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
	snap.ManifestJson = body
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
