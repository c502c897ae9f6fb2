package auditsvc

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
	"github.com/agtpsuite/agtp/services/kit"
)

// Config is the auditsvc configuration.
type Config struct {
	kit.Common
	// ServerID is written as server_id when a record's claims omit it.
	ServerID string
	// VerifyKeyFiles are retired signing keys (public or private, PEM or
	// JWK) kept so that old records still verify and appear in the JWKS.
	VerifyKeyFiles []string
	// ArchiveDir turns on the rotated JSONL archive of appended records.
	ArchiveDir string
	// Options tune the chain store and limits (docs/audit.md).
	Options server.Options
}

// MinRequestWindow is the shortest request window the service accepts. The
// front door retries an append for at most its 5-second audit deadline, so
// a minute keeps every retry of its inside the window with room to spare;
// a shorter window would let a retry append a second record.
const MinRequestWindow = time.Minute

// DefaultConfig returns the defaults used by make run.
func DefaultConfig() Config {
	c := Config{Common: kit.DefaultCommon("auditsvc", "127.0.0.1:7105", "127.0.0.1:8105"), ServerID: "agtp.localhost"}
	c.RedisRequired = true
	c.Options.Chain.ReplicaTimeout = chain.DefaultReplicaTimeout
	c.Options.Chain.RequestWindow = chain.DefaultRequestWindow
	c.Options.RefusalSummaryInterval = server.DefaultRefusalSummaryInterval
	return c
}

// BindFlags registers the flags of auditsvc.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Common.BindFlags(fs)
	fs.StringVar(&c.ServerID, "server-id", c.ServerID, "server_id for records whose claims omit it (env AGTP_SERVER_ID)")
	fs.StringVar(&c.ArchiveDir, "archive-dir", c.ArchiveDir, "directory for the JSONL archive of records; empty disables (env AGTP_AUDIT_ARCHIVE_DIR)")
	fs.IntVar(&c.Options.Chain.ReplicaAcks, "audit-replica-acks", c.Options.Chain.ReplicaAcks,
		"Redis replicas that must have an audit record before it is acknowledged; 0 does not wait (env AGTP_AUDIT_REPLICA_ACKS)")
	fs.DurationVar(&c.Options.Chain.ReplicaTimeout, "audit-replica-timeout", c.Options.Chain.ReplicaTimeout,
		"how long an audit append waits for its replicas before it fails as unavailable (env AGTP_AUDIT_REPLICA_TIMEOUT)")
	fs.DurationVar(&c.Options.Chain.RequestWindow, "audit-request-window", c.Options.Chain.RequestWindow,
		"how long a request ID's entry is kept: a retry within it gets the record appended then, a later one appends another; at least "+MinRequestWindow.String()+" (env AGTP_AUDIT_REQUEST_WINDOW)")
	fs.DurationVar(&c.Options.RefusalSummaryInterval, "refusal-summary-interval", c.Options.RefusalSummaryInterval,
		"how often the anonymous refusals signed unchained are summarised into the server chain (env AGTP_AUDIT_REFUSAL_SUMMARY_INTERVAL)")
	fs.DurationVar(&c.Options.Retention, "audit-retention", c.Options.Retention,
		"how long records stay in Redis before they are moved to the archive, their chains continuing from a signed checkpoint; 0 keeps everything; needs the archive (env AGTP_AUDIT_RETENTION)")
	fs.Func("verify-key", "retired signing key kept for verification, repeatable (env AGTP_VERIFY_KEY_FILES=a,b)", func(v string) error {
		c.VerifyKeyFiles = append(c.VerifyKeyFiles, v)
		return nil
	})
}

// ApplyEnv reads the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("AGTP_SERVER_ID"); ok && v != "" {
		c.ServerID = v
	}
	if v, ok := lookup("AGTP_AUDIT_ARCHIVE_DIR"); ok && v != "" {
		c.ArchiveDir = v
	}
	if v, ok := lookup("AGTP_VERIFY_KEY_FILES"); ok && v != "" {
		c.VerifyKeyFiles = strings.Split(v, ",")
	}
	if v, ok := lookup("AGTP_AUDIT_REPLICA_ACKS"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("AGTP_AUDIT_REPLICA_ACKS: %w", err)
		}
		c.Options.Chain.ReplicaAcks = n
	}
	if v, ok := lookup("AGTP_AUDIT_REPLICA_TIMEOUT"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("AGTP_AUDIT_REPLICA_TIMEOUT: %w", err)
		}
		c.Options.Chain.ReplicaTimeout = d
	}
	if v, ok := lookup("AGTP_AUDIT_REQUEST_WINDOW"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("AGTP_AUDIT_REQUEST_WINDOW: %w", err)
		}
		c.Options.Chain.RequestWindow = d
	}
	if v, ok := lookup("AGTP_AUDIT_REFUSAL_SUMMARY_INTERVAL"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("AGTP_AUDIT_REFUSAL_SUMMARY_INTERVAL: %w", err)
		}
		c.Options.RefusalSummaryInterval = d
	}
	if v, ok := lookup("AGTP_AUDIT_RETENTION"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("AGTP_AUDIT_RETENTION: %w", err)
		}
		c.Options.Retention = d
	}
	return c.Common.ApplyEnv(lookup)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.Common.Validate())
	if c.SigningKeyFile == "" {
		errs = append(errs, errors.New("a signing key is required (AGTP_SIGNING_KEY_FILE); records are never signed with alg none by the service"))
	}
	if c.Options.Chain.ReplicaAcks < 0 {
		errs = append(errs, fmt.Errorf("audit replica acks (AGTP_AUDIT_REPLICA_ACKS) is %d; it must be 0 or more", c.Options.Chain.ReplicaAcks))
	}
	if c.Options.Chain.ReplicaAcks > 0 && c.Options.Chain.ReplicaTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("audit replica timeout (AGTP_AUDIT_REPLICA_TIMEOUT) is %v; with replica acks it must be at least 1ms", c.Options.Chain.ReplicaTimeout))
	}
	if w := c.Options.Chain.RequestWindow; w < MinRequestWindow {
		errs = append(errs, fmt.Errorf("audit request window (AGTP_AUDIT_REQUEST_WINDOW) is %v; it must be at least %v, longer than any caller keeps retrying one append", w, MinRequestWindow))
	}
	if c.Options.Retention < 0 {
		errs = append(errs, fmt.Errorf("audit retention (AGTP_AUDIT_RETENTION) is %v; it must be 0 (keep everything) or more", c.Options.Retention))
	}
	if c.Options.Retention > 0 && c.ArchiveDir == "" {
		errs = append(errs, errors.New("audit retention (AGTP_AUDIT_RETENTION) needs the archive (AGTP_AUDIT_ARCHIVE_DIR): records older than the retention are moved there"))
	}
	return errors.Join(errs...)
}
