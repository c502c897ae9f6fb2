// Package demo is a small endpoint set for `make run` and for tests: a
// few endpoints across several verbs, bound to registered functions under
// demo.* that the front door provides. The catalog service loads it when
// no endpoints directory is configured and demo endpoints are enabled.
package demo

import (
	"embed"
	"fmt"
	"io/fs"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// FS holds the demo definitions (*.yaml at its root).
//
//go:embed *.yaml
var FS embed.FS

// Functions are the registered_function names the demo binds.
var Functions = []string{
	"demo.orders.get", "demo.orders.list", "demo.orders.create", "demo.orders.cancel", "demo.orders.purchase",
	"demo.orders.authorize", "demo.orders.transfer", "demo.customers.register",
	"demo.documents.summarize", "demo.reports.run", "demo.procedures.reindex",
}

// Endpoints compiles the demo definitions without the catalog's checks
// (the catalog service applies those when it registers them), for tests
// that need the demo endpoints as a front door holds them.
func Endpoints() ([]*endpoint.Endpoint, error) {
	names, err := fs.Glob(FS, "*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*endpoint.Endpoint
	for _, n := range names {
		b, err := fs.ReadFile(FS, n)
		if err != nil {
			return nil, err
		}
		eps, err := endpoint.ParseAndCompile(n, b, endpoint.FormatAuto, endpoint.Context{InheritCapability: true})
		if err != nil {
			return nil, fmt.Errorf("demo %s: %w", n, err)
		}
		out = append(out, eps...)
	}
	return out, nil
}
