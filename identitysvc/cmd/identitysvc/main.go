// Command identitysvc runs the identitysvc service of the AGTP suite.
package main

import (
	"context"
	"os"

	"github.com/agtpsuite/agtp/identitysvc"
	"github.com/agtpsuite/agtp/services/command"
)

func main() {
	cfg := identitysvc.DefaultConfig()
	os.Exit(command.Main("identitysvc", &cfg, func(ctx context.Context) (command.Service, error) {
		return identitysvc.New(ctx, cfg)
	}))
}
