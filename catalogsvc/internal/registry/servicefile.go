package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/builtin"
	"github.com/agtpsuite/agtp/catalogsvc/internal/policy"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

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
