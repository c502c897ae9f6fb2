// Package registry assembles one consistent configuration of the contract
// layer: the catalog, the method policy, the built-in, file and runtime
// endpoints, the service document (_service file), the route table, the
// manifest and the snapshot the front door routes from.
//
// Build validates everything and fails as a whole: a configuration with
// one bad file is never published, so the previous one keeps serving.
package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/builtin"
	"github.com/agtpsuite/agtp/catalogsvc/internal/policy"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

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
