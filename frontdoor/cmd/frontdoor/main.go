// Command frontdoor runs the AGTP front door of the suite.
package main

import (
	"context"
	"os"

	"github.com/agtpsuite/agtp/frontdoor"
	"github.com/agtpsuite/agtp/services/command"
)

func main() {
	cfg := frontdoor.DefaultConfig()
	os.Exit(command.Main("frontdoor", &cfg, func(ctx context.Context) (command.Service, error) {
		return frontdoor.New(ctx, cfg)
	}))
}
