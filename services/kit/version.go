package kit

import (
	"runtime/debug"
	"sync"
)

// version is set at link time by release builds:
//
//	go build -ldflags "-X github.com/agtpsuite/agtp/services/kit.version=v1.2.3"
//
// (the Makefile's build target passes VERSION this way).
var version string

// Version is the suite's version as the resource's service.version: the
// link-time version, else the module version the binary was built at (a
// `go install ...@v1.2.3`), else the VCS revision the toolchain stamped,
// else "devel".
var Version = sync.OnceValue(func() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionOf(info)
})

func versionOf(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return "devel-" + rev
}
