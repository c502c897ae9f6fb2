package attribution

import (
	"encoding/json"
	"errors"
	"fmt"
)

// A chain whose oldest records were moved out of the audit store starts at
// a checkpoint: a small JWS, signed with the audit signing key, that names
// the last moved record's sequence and Audit-ID. A verifier checks the
// checkpoint's signature and continues the chain from it; the moved
// records are in the archive and verify there from ZeroAuditID.
//
// Records are signed with the same key and carry members their callers
// choose, so a checkpoint is told apart by its protected header, typ
// CheckpointType (explicit typing, RFC 8725 §3.11): VerifyCheckpoint
// requires it and Verify refuses it. Its payload has exactly the
// checkpoint members, no other.

// CheckpointVersion is the checkpoint_version of a checkpoint record.
const CheckpointVersion = "1"

// CheckpointType is the protected header typ of a checkpoint.
const CheckpointType = "agtp-checkpoint+jwt"

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

// checkpointMembers are the members of a checkpoint's payload, every one
// required.
var checkpointMembers = map[string]bool{
	"checkpoint_version": true, "stream": true, "chain": true,
	"last_sequence": true, "last_audit_id": true, "trimmed_at": true,
}

// IsCheckpointMember reports whether name is the member that marks a
// checkpoint's payload, which no record may carry.
func IsCheckpointMember(name string) bool { return name == "checkpoint_version" }

// ErrCheckpoint: a chain's checkpoint is malformed, does not verify or
// does not name its chain.
var ErrCheckpoint = errors.New("chain checkpoint invalid")

// ErrUntypedCheckpoint: the checkpoint has no typ; an earlier release
// signed checkpoints so. It wraps ErrCheckpoint where VerifyCheckpoint
// returns it.
var ErrUntypedCheckpoint = errors.New("checkpoint has no typ " + CheckpointType +
	" (signed by an earlier release; the next retention pass signs it again)")

// SignCheckpoint signs cp's members (not cp.JWS) as a checkpoint.
func (s *Signer) SignCheckpoint(cp Checkpoint) (string, error) {
	body, err := json.Marshal(cp)
	if err != nil {
		return "", fmt.Errorf("attribution: marshal checkpoint: %w", err)
	}
	return s.signTyped(CheckpointType, body), nil
}

// VerifyCheckpoint checks a checkpoint's typ and signature against opts
// and that it names (stream, chain). Every failure wraps ErrCheckpoint;
// a JWS without typ also wraps ErrUntypedCheckpoint.
func VerifyCheckpoint(jws, stream, chain string, opts VerifyOptions) (*Checkpoint, error) {
	rec, err := verifySignature(jws, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	switch rec.Typ {
	case CheckpointType:
	case "":
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, ErrUntypedCheckpoint)
	default:
		return nil, fmt.Errorf("%w: typ %q, not %q", ErrCheckpoint, rec.Typ, CheckpointType)
	}
	return checkpointOf(rec, stream, chain)
}

// VerifyUntypedCheckpoint is VerifyCheckpoint for a checkpoint an earlier
// release signed without typ (ErrUntypedCheckpoint), so that it can be
// signed again with it. Nothing but such a checkpoint passes: a JWS with
// a typ is refused, and so is every record, since the store writes
// previous_audit_id and audit_record_version into each and a checkpoint's
// payload may hold no member but its own.
func VerifyUntypedCheckpoint(jws, stream, chain string, opts VerifyOptions) (*Checkpoint, error) {
	rec, err := verifySignature(jws, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if rec.Typ != "" {
		return nil, fmt.Errorf("%w: typ %q on a checkpoint taken for an earlier release's", ErrCheckpoint, rec.Typ)
	}
	return checkpointOf(rec, stream, chain)
}

// checkpointOf reads and checks the checkpoint in a verified JWS.
func checkpointOf(rec *Record, stream, chain string) (*Checkpoint, error) {
	cp, err := decodeCheckpoint(rec.RawPayload)
	if err != nil {
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
	cp.JWS = rec.JWS
	return &cp, nil
}

// decodeCheckpoint reads a checkpoint payload strictly: exactly the
// checkpoint members, each once and spelled exactly (encoding/json alone
// would match names in any case and skip unknown ones).
func decodeCheckpoint(payload []byte) (Checkpoint, error) {
	var cp Checkpoint
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil || raw == nil {
		return cp, errors.New("payload is not a JSON object")
	}
	if topLevelMembers(payload) != len(raw) {
		return cp, errors.New("payload has duplicate member names")
	}
	for k := range raw {
		if !checkpointMembers[k] {
			return cp, fmt.Errorf("payload member %q is not a checkpoint member", k)
		}
	}
	if len(raw) != len(checkpointMembers) {
		return cp, fmt.Errorf("payload has %d of the %d checkpoint members", len(raw), len(checkpointMembers))
	}
	if err := json.Unmarshal(payload, &cp); err != nil {
		return cp, fmt.Errorf("payload: %v", err)
	}
	return cp, nil
}
