package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/agtpsuite/agtp/services/agtp"
)

// runVersion prints the build and the protocol versions, so a bug report
// can say exactly which agtp spoke to which server.
func runVersion(_ context.Context, args []string, env Env) int {
	if len(args) > 0 {
		return usageError(env, "version takes no arguments")
	}
	fmt.Fprintf(env.Stdout, "agtp %s (%s, %s/%s)\nprotocol %s, %s\n",
		buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH, agtp.Version, agtp.SpecVersion)
	return ExitOK
}

// buildVersion is the module version of an installed release, else the
// VCS revision the toolchain stamped into the binary, else "devel".
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	rev = "devel-" + rev[:min(len(rev), 12)]
	if dirty {
		rev += "-dirty"
	}
	return rev
}
