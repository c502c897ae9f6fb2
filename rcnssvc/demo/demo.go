// Package demo holds synthesis patterns over the catalog's demo endpoints
// (catalogsvc/demo), for `make run` and for tests: SUMMARIZE
// /orders/{order_id} (QUERY the order, then SUMMARIZE /documents) and
// SUMMARIZE /order-digest (QUERY /orders, then SUMMARIZE /documents).
package demo

import (
	_ "embed"

	"github.com/agtpsuite/agtp/rcnssvc/recipe"
)

// PatternsYAML is the demo patterns file.
//
//go:embed patterns.yaml
var PatternsYAML []byte

// FileName is the name the demo patterns are loaded under.
const FileName = "demo/patterns.yaml"

// Patterns parses the demo patterns.
func Patterns() ([]*recipe.Pattern, error) { return recipe.Load(FileName, PatternsYAML) }
