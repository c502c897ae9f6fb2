// Package catalogdata embeds the AGTP-API approved method catalog 1.0.0
// (see README.md for its origin), so the catalog service runs with no
// files.
package catalogdata

import _ "embed"

// DefaultVersion is the catalog version of Default.
const DefaultVersion = "1.0.0"

// Default is the embedded catalog document.
//
//go:embed agtp-api-methods-1.0.0.json
var Default []byte
