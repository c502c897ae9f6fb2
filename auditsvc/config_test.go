package auditsvc

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/testkit"
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
			c.SigningKeyFile = "signing.pem"
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

// The configured window is the lifetime of the request entries a real
// append leaves in Redis.
func TestRequestEntriesExpireAfterTheConfiguredWindow(t *testing.T) {
	c := DefaultConfig()
	if err := c.ApplyEnv(func(k string) (string, bool) {
		if k == "AGTP_AUDIT_REQUEST_WINDOW" {
			return "90s", true
		}
		return "", false
	}); err != nil {
		t.Fatal(err)
	}
	ks, err := attribution.LoadKeySet(testkit.PKI(t).SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := server.New(rdb, slog.New(slog.DiscardHandler), server.Options{ServerID: "audit.test", Keys: ks, Chain: c.Options.Chain})
	if err != nil {
		t.Fatal(err)
	}
	client := auditv1.NewAuditServiceClient(testkit.ServeGRPC(t, func(g grpc.ServiceRegistrar) { auditv1.RegisterAuditServiceServer(g, srv) }))
	ctx := context.Background()
	agent := strings.Repeat("b", 64)
	if _, err := client.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{ChainAgentId: agent, RequestId: "retry-me",
		ClaimsJson: []byte(`{"status":200,"method":"QUERY","agent_id":"` + agent + `","request_id":"r-1","response_id":"resp-1"}`)}); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "*auditrid*retry-me").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("request entries %v (%v), want one", keys, err)
	}
	ttl, err := rdb.PTTL(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 80*time.Second || ttl > 90*time.Second {
		t.Fatalf("the request entry expires in %v, want the configured 90s", ttl)
	}
}
