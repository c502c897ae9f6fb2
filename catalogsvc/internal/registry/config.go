package registry

import (
	"encoding/json"
	"path"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/internal/catalog"
	"github.com/agtpsuite/agtp/catalogsvc/internal/policy"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
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
