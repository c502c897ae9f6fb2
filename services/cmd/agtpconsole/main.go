// Command agtpconsole serves the operator console (services/console) on
// the admin plane: web pages for the people who govern the agents.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/agtpsuite/agtp/services/command"
	"github.com/agtpsuite/agtp/services/console"
)

func main() {
	cfg := console.Default()
	os.Exit(command.Main("agtpconsole", &cfg, func(ctx context.Context) (command.Service, error) {
		return console.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	}))
}
