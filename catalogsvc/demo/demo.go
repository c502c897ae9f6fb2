// Package demo is a small endpoint set for `make run` and for tests: a
// few endpoints across several verbs, bound to registered functions under
// demo.* that the front door provides. The catalog service loads it when
// no endpoints directory is configured and demo endpoints are enabled.
package demo

import "embed"

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
