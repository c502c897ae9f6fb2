// Command policysvc runs the policysvc service of the AGTP suite.
package main

import (
	"context"
	"os"

	"github.com/agtpsuite/agtp/policysvc"
	"github.com/agtpsuite/agtp/services/command"
)

func main() {
	cfg := policysvc.DefaultConfig()
	os.Exit(command.Main("policysvc", &cfg, func(ctx context.Context) (command.Service, error) {
		return policysvc.New(ctx, cfg)
	}))
}
