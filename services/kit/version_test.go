package kit

import (
	"runtime/debug"
	"testing"
)

func TestVersionOfABuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"no version, no VCS", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"VCS revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "29bd0681234567890abcdef"}, {Key: "vcs.modified", Value: "false"}}}, "devel-29bd06812345"},
		{"modified tree", debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}, "devel-abc-dirty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionOf(&tc.info); got != tc.want {
				t.Errorf("versionOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseSwitch(t *testing.T) {
	for in, want := range map[string]bool{"on": true, "ON": true, "off": false, "true": true, "0": false} {
		if got, err := ParseSwitch(in); err != nil || got != want {
			t.Errorf("ParseSwitch(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseSwitch("yes please"); err == nil {
		t.Error(`ParseSwitch took "yes please"`)
	}
}
