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
