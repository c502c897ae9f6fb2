package attribution

import (
	"encoding/json"
	"errors"
	"fmt"
)

// A chain whose oldest records were moved out of the audit store starts at
// a checkpoint: a small record, signed with the audit signing key, that
// names the last moved record's sequence and Audit-ID. A verifier checks
// the checkpoint's signature and continues the chain from it; the moved
// records are in the archive and verify there from ZeroAuditID.

// CheckpointVersion is the checkpoint_version of a checkpoint record.
const CheckpointVersion = "1"

// Checkpoint is the signed statement that the records of (Stream, Chain)
// up to Sequence, the last of them AuditID, were moved to the archive.
type Checkpoint struct {
	Version   string `json:"checkpoint_version"`
	Stream    string `json:"stream"`
	Chain     string `json:"chain"`
	Sequence  uint64 `json:"last_sequence"`
	AuditID   string `json:"last_audit_id"`
	TrimmedAt string `json:"trimmed_at"`
	// JWS is the signed record the fields were read from.
	JWS string `json:"-"`
}

// ErrCheckpoint: a chain's checkpoint is malformed, does not verify or
// does not name its chain.
var ErrCheckpoint = errors.New("chain checkpoint invalid")

// VerifyCheckpoint checks a checkpoint record's signature against opts and
// that it names (stream, chain). Every failure wraps ErrCheckpoint.
func VerifyCheckpoint(jws, stream, chain string, opts VerifyOptions) (*Checkpoint, error) {
	rec, err := Verify(jws, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(rec.RawPayload, &cp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	switch {
	case cp.Version != CheckpointVersion:
		return nil, fmt.Errorf("%w: checkpoint_version %q", ErrCheckpoint, cp.Version)
	case cp.Stream != stream || cp.Chain != chain:
		return nil, fmt.Errorf("%w: names %s/%s, not %s/%s", ErrCheckpoint, cp.Stream, cp.Chain, stream, chain)
	case cp.Sequence == 0 || !IsAuditID(cp.AuditID):
		return nil, fmt.Errorf("%w: no last sequence or Audit-ID", ErrCheckpoint)
	}
	cp.JWS = jws
	return &cp, nil
}
