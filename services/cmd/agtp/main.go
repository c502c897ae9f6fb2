// Command agtp sends AGTP requests and prints the answers: the curl of
// AGTP. Run `agtp --help` for flags and examples; the logic is in
// services/cmd/agtp/internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agtpsuite/agtp/services/cmd/agtp/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, StdoutTTY: isTerminal(os.Stdout),
	})
	stop()
	os.Exit(code)
}

// isTerminal reports a character device, which is what a terminal is;
// enough to decide on pretty printing without a terminal library.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
