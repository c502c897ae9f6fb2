package auditsvc

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionConfigNeedsArchive(t *testing.T) {
	env := map[string]string{"AGTP_AUDIT_RETENTION": "720h"}
	c := DefaultConfig()
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Options.Retention != 720*time.Hour {
		t.Fatalf("Retention = %v", c.Options.Retention)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "AGTP_AUDIT_ARCHIVE_DIR") {
		t.Fatalf("Validate without an archive: %v", err)
	}
	c.ArchiveDir = t.TempDir()
	if err := c.Validate(); err != nil && strings.Contains(err.Error(), "retention") {
		t.Fatalf("Validate with an archive: %v", err)
	}
	env["AGTP_AUDIT_RETENTION"] = "soon"
	bad := DefaultConfig()
	if err := bad.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil {
		t.Fatal("a bad AGTP_AUDIT_RETENTION was accepted")
	}
}

func TestRequestWindowSetting(t *testing.T) {
	for _, tc := range []struct {
		env       string // AGTP_AUDIT_REQUEST_WINDOW, "" for unset
		want      time.Duration
		applyErr  bool
		invalidIs string // a substring of Validate's error, "" for valid
	}{
		{env: "", want: 24 * time.Hour},
		{env: "10m", want: 10 * time.Minute},
		{env: "1m", want: time.Minute},
		{env: "30s", want: 30 * time.Second, invalidIs: "AGTP_AUDIT_REQUEST_WINDOW"},
		{env: "-1h", want: -time.Hour, invalidIs: "at least 1m0s"},
		{env: "a day", applyErr: true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			c := DefaultConfig()
			err := c.ApplyEnv(func(k string) (string, bool) {
				if k == "AGTP_AUDIT_REQUEST_WINDOW" && tc.env != "" {
					return tc.env, true
				}
				return "", false
			})
			if tc.applyErr {
				if err == nil || !strings.Contains(err.Error(), "AGTP_AUDIT_REQUEST_WINDOW") {
					t.Fatalf("ApplyEnv(%q) = %v, want an error naming the variable", tc.env, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Options.Chain.RequestWindow != tc.want {
				t.Fatalf("RequestWindow = %v, want %v", c.Options.Chain.RequestWindow, tc.want)
			}
			err = c.Validate()
			mentions := err != nil && strings.Contains(err.Error(), "request window")
			if tc.invalidIs == "" && mentions {
				t.Fatalf("Validate refused a window of %v: %v", tc.want, err)
			}
			if tc.invalidIs != "" && (!mentions || !strings.Contains(err.Error(), tc.invalidIs)) {
				t.Fatalf("Validate(window %v) = %v, want an error with %q", tc.want, err, tc.invalidIs)
			}
		})
	}
}
