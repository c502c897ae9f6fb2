// Package composition runs composition handler bindings (AGTP-API
// §12.1): an endpoint whose handler names a recipe runs the recipe's
// steps, each a call of another endpoint on the same server under the
// caller's identity, in order, threading outputs into later inputs.
//
// Recipes are in the project's recipe format (rcnssvc/recipe, the same
// one RCNS synthesizes contracts from). The front door's registry is
// loaded at start-up from a directory (AGTP_RECIPES_DIR) and, in demo
// mode, from the embedded demo recipes; a recipe not found there is asked
// of rcnssvc, which keeps the recipes that PROPOSE promoted into the
// catalog.
package composition

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
)

// MaxRecipes bounds one registry.
const MaxRecipes = 4096

// Registry holds recipes by name. It is read-only once loaded.
type Registry struct {
	byName map[string]*recipe.Recipe
	from   map[string]string // name -> file, for duplicate reports
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]*recipe.Recipe{}, from: map[string]string{}}
}

//go:embed demo/*.yaml
var demoFS embed.FS

// Demo returns the embedded demo recipes.
func Demo() (*Registry, error) {
	sub, err := fs.Sub(demoFS, "demo")
	if err != nil {
		return nil, err
	}
	return LoadFS(sub)
}

// LoadDir loads every *.yaml, *.yml and *.json file under dir.
func LoadDir(dir string) (*Registry, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("recipes directory: %w", err)
	}
	return LoadFS(os.DirFS(dir))
}

// LoadFS loads every *.yaml, *.yml and *.json file of fsys (recursively),
// reporting every problem of every file at once. A recipe name declared
// twice is an error.
func LoadFS(fsys fs.FS) (*Registry, error) {
	r := NewRegistry()
	var errs []error
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		switch strings.ToLower(path.Ext(p)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		rs, err := Parse(p, data)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		for _, rec := range rs {
			if err := r.add(p, rec); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recipes: %w", err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

func (r *Registry) add(file string, rec *recipe.Recipe) error {
	if prev, dup := r.from[rec.Name]; dup {
		return fmt.Errorf("%s: recipe %s is already declared in %s", file, rec.Name, prev)
	}
	if len(r.byName) >= MaxRecipes {
		return fmt.Errorf("%s: more than %d recipes", file, MaxRecipes)
	}
	r.byName[rec.Name], r.from[rec.Name] = rec, file
	return nil
}

// Merge adds other's recipes; a name in both is an error.
func (r *Registry) Merge(other *Registry) error {
	var errs []error
	for _, name := range other.Names() {
		if err := r.add(other.from[name], other.byName[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the recipe named name.
func (r *Registry) Lookup(name string) (*recipe.Recipe, bool) {
	if r == nil {
		return nil, false
	}
	rec, ok := r.byName[name]
	return rec, ok
}

// Has reports whether name is registered (the catalog's Recipes hook).
func (r *Registry) Has(name string) bool {
	_, ok := r.Lookup(name)
	return ok
}

// Names lists the recipe names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// recipeFile is a file of several recipes.
type recipeFile struct {
	Recipes []*recipe.Recipe `json:"recipes"`
}

// Parse decodes a recipes file, JSON or YAML: one recipe object, or
// {"recipes": [...]}. Unknown members are refused so typos surface at
// load, and every recipe is validated (names, steps, references, paths,
// timeouts).
func Parse(file string, data []byte) ([]*recipe.Recipe, error) {
	v, err := endpoint.DecodeValue(file, data)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	strict := func(dst any) error {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		return dec.Decode(dst)
	}
	var list []*recipe.Recipe
	if m, ok := v.(map[string]any); ok && len(m) == 1 && m["recipes"] != nil {
		var f recipeFile
		if err := strict(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		list = f.Recipes
	} else {
		var one recipe.Recipe
		if err := strict(&one); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		list = []*recipe.Recipe{&one}
	}
	var errs []error
	for i, rec := range list {
		where := fmt.Sprintf("%s: recipes[%d]", file, i)
		if rec == nil {
			errs = append(errs, fmt.Errorf("%s: null", where))
			continue
		}
		if err := Validate(rec); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", where, rec.Name, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return list, nil
}

// Validate checks a recipe as the front door runs it: a valid name and
// version, and the recipe package's structural rules.
func Validate(rec *recipe.Recipe) error {
	var errs []error
	if !recipe.ValidName(rec.Name) {
		errs = append(errs, fmt.Errorf("recipe_name %q: letters, digits, '.', '_' and '-', at most 128", rec.Name))
	}
	if !recipe.ValidVersion(rec.Version) {
		errs = append(errs, fmt.Errorf("recipe_version %q: required; letters, digits, '.', '_', '+' and '-', at most 64", rec.Version))
	}
	if err := rec.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
