package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/rcnssvc/demo"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Options)
		want string
	}{
		"mode":            {func(o *Options) { o.RCNS.Mode = "eager" }, "rcns.mode"},
		"tier 0":          {func(o *Options) { o.RCNS.MinTrustTier = 0 }, "min_trust_tier"},
		"tier 4":          {func(o *Options) { o.RCNS.MinTrustTier = 4 }, "min_trust_tier"},
		"ttl":             {func(o *Options) { o.RCNS.ContractTTL = 0 }, "contract_ttl"},
		"policy change":   {func(o *Options) { o.RCNS.OnPolicyChange = "ignore" }, "on_policy_change"},
		"scope":           {func(o *Options) { o.RCNS.NegotiateScope = "RCNS" }, "negotiate_scope"},
		"turns":           {func(o *Options) { o.Propose.MaxTurns = 0 }, "max_turns"},
		"async > timeout": {func(o *Options) { o.Propose.AsyncAfter = time.Minute }, "evaluation_timeout"},
		"cap":             {func(o *Options) { o.Contracts.MaxPerAgent = 0 }, "max_per_agent"},
		"attempts":        {func(o *Options) { o.Attempts.Max = 0 }, "attempts"},
		"nil pattern":     {func(o *Options) { o.Patterns = append(o.Patterns, nil) }, "patterns[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mut(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// The patterns file is read at New (a bad one fails New) and polled: a
// good change replaces the patterns, a bad one keeps the previous ones.
func TestPatternsFileReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "patterns.yaml")
	if err := os.WriteFile(file, []byte("patterns: [{recipe_name: x}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	cat, aud := (&fakeCatalog{}).serve(t), (&fakeAudit{}).serve(t)
	o := DefaultOptions()
	o.PatternsFile = file
	rdb := testkit.StartRedis(t).Client(t)
	if _, err := New(rdb, nil, cat, nil, aud, noLimits(o)); err == nil {
		t.Fatal("New accepted a bad patterns file")
	}
	if err := os.WriteFile(file, demo.PatternsYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, nil, cat, nil, aud, noLimits(o))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Patterns()) != 2 {
		t.Fatalf("%d patterns", len(s.Patterns()))
	}
	one := strings.SplitN(string(demo.PatternsYAML), "  # SUMMARIZE /order-digest", 2)[0]
	if err := os.WriteFile(file, []byte(one), 0o600); err != nil {
		t.Fatal(err)
	}
	s.reloadPatterns(t.Context())
	if len(s.Patterns()) != 1 || s.Patterns()[0].RecipeName != "order-summary" {
		t.Fatalf("after a good change: %d patterns", len(s.Patterns()))
	}
	if err := os.WriteFile(file, []byte("patterns: 7"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.reloadPatterns(t.Context())
	if len(s.Patterns()) != 1 {
		t.Fatalf("a bad change replaced the patterns: %d", len(s.Patterns()))
	}
}

func noLimits(o Options) Options {
	o.RCNS.RateLimitScope, o.Propose.RateLimitScope = "", ""
	return o
}
