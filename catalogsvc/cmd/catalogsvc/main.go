// Command catalogsvc runs the catalogsvc service of the AGTP suite.
package main

import (
	"context"
	"os"

	"github.com/agtpsuite/agtp/catalogsvc"
	"github.com/agtpsuite/agtp/services/command"
)

func main() {
	cfg := catalogsvc.DefaultConfig()
	os.Exit(command.Main("catalogsvc", &cfg, func(ctx context.Context) (command.Service, error) {
		return catalogsvc.New(ctx, cfg)
	}))
}
