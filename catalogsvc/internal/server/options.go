package server

import (
	"crypto"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/internal/policy"
	"github.com/agtpsuite/agtp/catalogsvc/internal/registry"
)

// Options configure the catalog service. DefaultOptions gives the
// defaults; Validate reports every problem at once.
type Options struct {
	// CatalogFile is a method catalog document (JSON); empty uses the
	// embedded AGTP-API approved method catalog 1.0.0.
	CatalogFile string
	// EndpointsDir is a directory of endpoint definition files (*.yaml,
	// *.yml, *.json, plus an optional _service.yaml); empty means none.
	EndpointsDir string
	// DemoEndpoints loads the embedded demo endpoint set when EndpointsDir
	// is empty (make run). Default false.
	DemoEndpoints bool
	// MaxRuntimeEndpoints bounds the endpoints registered through the
	// admin API, tombstones of hidden file endpoints included. Default
	// store.DefaultMaxEndpoints (10,000).
	MaxRuntimeEndpoints int
	// ReloadInterval is how often EndpointsDir is polled for changes;
	// 0 disables polling. Default 2 s.
	ReloadInterval time.Duration
	// ResyncInterval re-reads the runtime endpoints from Redis, in case a
	// change notification was lost. Default 30 s; 0 disables.
	ResyncInterval time.Duration

	// Manifest fields (AGTP-API §8.2-§8.6). ServerID is required.
	Manifest registry.ManifestInfo
	// Methods is the policies.methods block (AGTP-API §9); the
	// _service file's policies.methods replaces it.
	Methods policy.Methods
	// Toggles are the policies toggles (AGTP-API §8.7); the _service file
	// overrides single members.
	Toggles registry.Toggles
	// BuiltinOverrides are built-in DISCOVER paths an operator file may
	// replace (the draft's policies.builtins, §5.9).
	BuiltinOverrides []string

	// SigningKey signs the manifest (Ed25519); nil publishes it unsigned
	// (manifest_signature null). SigningKeyID is the JWS kid.
	SigningKey   crypto.Signer
	SigningKeyID string

	// Functions resolves registered_function names; nil accepts any
	// well-formed name (the front door resolves them when it binds).
	Functions func(name string) bool
	// Recipes resolves composition recipe names; nil accepts any.
	Recipes func(name string) bool
	// LookupEnv resolves ${VAR} in external_service headers; nil leaves
	// them to the front door. Libraries never read the environment: the
	// command layer passes os.LookupEnv when it wants the check here.
	LookupEnv func(name string) (string, bool)
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		ReloadInterval: 2 * time.Second,
		ResyncInterval: 30 * time.Second,
		Manifest: registry.ManifestInfo{
			AgtpVersion:           "1.0",
			AgtpAPIVersion:        "1.0",
			AgentDisclosure:       "public",
			SupportedFeatures:     []string{"endpoint-registry"},
			DocumentVersionPrefix: "v",
		},
		Toggles: registry.DefaultToggles(),
	}
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.Manifest.ServerID == "" {
		errs = append(errs, errors.New("catalogsvc: manifest server_id is empty"))
	}
	if o.Manifest.AgtpVersion == "" || o.Manifest.AgtpAPIVersion == "" {
		errs = append(errs, errors.New("catalogsvc: agtp_version and agtp_api_version must be set"))
	}
	if !slices.Contains([]string{"public", "authenticated", "private"}, o.Manifest.AgentDisclosure) {
		errs = append(errs, fmt.Errorf("catalogsvc: agent_disclosure %q is not public, authenticated or private", o.Manifest.AgentDisclosure))
	}
	if o.ReloadInterval < 0 || o.ResyncInterval < 0 {
		errs = append(errs, errors.New("catalogsvc: intervals must not be negative"))
	}
	if o.ReloadInterval > 0 && o.ReloadInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("catalogsvc: reload interval below 100ms"))
	}
	if o.Toggles.MaxSynthesisDepth < 1 {
		errs = append(errs, errors.New("catalogsvc: max_synthesis_depth must be a positive integer"))
	}
	if o.SigningKey != nil && o.SigningKeyID == "" {
		errs = append(errs, errors.New("catalogsvc: a signing key needs a key ID"))
	}
	return errors.Join(errs...)
}
