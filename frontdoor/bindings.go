package frontdoor

import (
	"fmt"
	"io/fs"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/composition"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/kit"
)

// WithRecipes adds composition recipes (rcnssvc/recipe format, *.yaml,
// *.yml or *.json anywhere in fsys) to those of Config.RecipesDir, for an
// operator who embeds them in their own front door build.
func WithRecipes(fsys fs.FS) Option {
	return func(o *options) { o.recipes = append(o.recipes, fsys) }
}

// newBindings builds the executors of external_service and composition
// endpoints (docs/bindings.md). Recipes that do not load fail start-up.
func newBindings(cfg Config, o options, rcns rcnsv1.RcnsServiceClient, tp trace.TracerProvider, log *slog.Logger) (*pipeline.Bindings, error) {
	recipes := composition.NewRegistry()
	add := func(what string, r *composition.Registry, err error) error {
		if err != nil {
			return fmt.Errorf("frontdoor: %s: %w", what, err)
		}
		return recipes.Merge(r)
	}
	if cfg.Demo {
		r, err := composition.Demo()
		if err := add("demo recipes", r, err); err != nil {
			return nil, err
		}
	}
	if cfg.RecipesDir != "" {
		r, err := composition.LoadDir(cfg.RecipesDir)
		if err := add("recipes "+cfg.RecipesDir, r, err); err != nil {
			return nil, err
		}
	}
	for _, fsys := range o.recipes {
		r, err := composition.LoadFS(fsys)
		if err := add("recipes", r, err); err != nil {
			return nil, err
		}
	}
	up, err := upstream.New(upstream.Options{
		LookupEnv:      cfg.LookupEnv,
		CAFile:         cfg.UpstreamCAFile,
		TracerProvider: tp,
		Propagator:     kit.Propagator,
		Log:            log,
	})
	if err != nil {
		return nil, err
	}
	log.Info("handler bindings ready", "recipes", recipes.Names())
	return &pipeline.Bindings{
		Upstream:     up,
		Compositions: composition.New(composition.Options{Recipes: recipes, RCNS: rcns, Log: log}),
	}, nil
}
