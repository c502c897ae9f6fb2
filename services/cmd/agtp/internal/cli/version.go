package cli

import (
	"context"
	"fmt"
	"runtime"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/kit"
)

// runVersion prints the build and the protocol versions, so a bug report
// can say exactly which agtp spoke to which server. The build version is
// the one the services put on their telemetry (kit.Version).
func runVersion(_ context.Context, args []string, env Env) int {
	if len(args) > 0 {
		return usageError(env, "version takes no arguments")
	}
	fmt.Fprintf(env.Stdout, "agtp %s (%s, %s/%s)\nprotocol %s, %s\n",
		kit.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH, agtp.Version, agtp.SpecVersion)
	return ExitOK
}
