// Package builtin holds the DISCOVER built-in endpoints of AGTP-API §5.8
// as endpoint definitions. They are Tier A: they appear in the manifest
// and in DISCOVER /methods like any endpoint and pass the same gates, and
// their handlers (the function names under agtp.builtin.discover) live in
// the front door.
package builtin

import _ "embed"

// Definitions is an endpoints document with the built-ins: the eight
// DISCOVER endpoints, the other methods the front door serves itself
// (DESCRIBE, INSPECT, PROPOSE, QUOTE, SUSPEND, RESUME, RETRY, MONITOR and the five
// lifecycle methods), QUERY /inbox, and the floor methods on / that
// resolve intents and goals against the caller's endpoints (QUERY, PLAN,
// SUMMARIZE and EXECUTE /, docs/intent.md).
//
//go:embed builtins.json
var Definitions []byte

// Paths are the built-in DISCOVER paths, root first.
var Paths = []string{"/", "/methods", "/agents", "/genesis", "/tools", "/apis", "/patterns", "/contracts"}
