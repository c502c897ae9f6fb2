// Command rcnssvc runs the rcnssvc service of the AGTP suite.
package main

import (
	"context"
	"os"

	"github.com/agtpsuite/agtp/rcnssvc"
	"github.com/agtpsuite/agtp/services/command"
)

func main() {
	cfg := rcnssvc.DefaultConfig()
	os.Exit(command.Main("rcnssvc", &cfg, func(ctx context.Context) (command.Service, error) {
		return rcnssvc.New(ctx, cfg)
	}))
}
