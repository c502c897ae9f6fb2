// Command auditsvc runs the auditsvc service of the AGTP suite.
package main

import (
	"context"
	"os"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/services/command"
)

func main() {
	cfg := auditsvc.DefaultConfig()
	os.Exit(command.Main("auditsvc", &cfg, func(ctx context.Context) (command.Service, error) {
		return auditsvc.New(ctx, cfg)
	}))
}
