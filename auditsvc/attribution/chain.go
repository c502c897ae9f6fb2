package attribution

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Problem tokens a chain check reports for the first broken record.
const (
	ProblemMalformed        = "malformed"
	ProblemAuditIDMismatch  = "audit-id-mismatch"
	ProblemAlgorithmRefused = "algorithm-refused"
	ProblemUnknownKey       = "unknown-key"
	ProblemBadSignature     = "signature-invalid"
	ProblemBrokenLink       = "previous-audit-id-mismatch"
	ProblemAgentMismatch    = "agent-id-mismatch"
	ProblemVersion          = "audit-record-version-unsupported"
	ProblemFetch            = "record-unavailable"
	ProblemTooLong          = "chain-too-long"
	// ProblemSequenceGap: a stored or exported chain skips or repeats a
	// sequence number (a record was deleted or duplicated).
	ProblemSequenceGap = "sequence-gap"
	// ProblemHeadMismatch: the stored head does not name the newest record.
	ProblemHeadMismatch = "head-mismatch"
	// ProblemCheckpoint: the checkpoint a trimmed chain starts from is
	// malformed, does not verify or does not fit the chain.
	ProblemCheckpoint = "checkpoint-invalid"
)

// ChainOptions configure a chain check.
type ChainOptions struct {
	VerifyOptions
	// AgentID, when set, must equal every record's agent_id. Leave it
	// empty for the server's own chain, which carries anonymous and
	// unauthenticated traffic.
	AgentID string
	// Start is the previous_audit_id the first record must carry:
	// ZeroAuditID (the default) for a whole chain, or the Audit-ID of the
	// record before a checked segment.
	Start string
}

// Break describes the first record that fails a chain check.
type Break struct {
	// Index is the 0-based position in the order records were checked.
	Index uint64
	// AuditID is the Audit-ID computed from the record ("" when the
	// record could not be fetched).
	AuditID string
	// Expected is what the check wanted (an Audit-ID or previous link).
	Expected string
	Problem  string
	Err      error
}

func (b *Break) Error() string {
	return fmt.Sprintf("record %d (%s): %s: %v", b.Index, b.AuditID, b.Problem, b.Err)
}

// ChainResult is the outcome of a chain check.
type ChainResult struct {
	Valid bool
	// Checked is the number of records that passed before the first break.
	Checked uint64
	// Head is the Audit-ID of the newest record that passed (forward
	// checks) or of the first record checked (backward walks).
	Head  string
	Break *Break
	// Unsigned counts alg-none records accepted (only when allowed); they
	// are never authoritative (core §10.4.9).
	Unsigned uint64
}

// ChainVerifier checks records of one chain oldest first, one at a time,
// so that a chain of any length is checked in constant memory.
type ChainVerifier struct {
	opts   ChainOptions
	prev   string
	res    ChainResult
	broken bool
}

// NewChainVerifier starts a forward check.
func NewChainVerifier(opts ChainOptions) *ChainVerifier {
	prev := opts.Start
	if prev == "" {
		prev = ZeroAuditID
	}
	return &ChainVerifier{opts: opts, prev: prev, res: ChainResult{Valid: true}}
}

// Add checks the next record. claimedAuditID, when not empty, is the
// Audit-ID the store or export file says the record has; it must match the
// computed one. Add returns the *Break on the first failure and keeps
// returning it afterwards.
func (v *ChainVerifier) Add(jws, claimedAuditID string) (*Record, error) {
	if v.broken {
		return nil, v.res.Break
	}
	return v.AddChecked(Check(jws, claimedAuditID, v.opts.VerifyOptions))
}

// Checked is one record whose signature was checked (Check,
// CheckParallel), ready for ChainVerifier.AddChecked: the costly part
// of a chain check, which needs no other record, done apart from the
// links, which need the records in order.
type Checked struct {
	JWS, Claimed string
	Rec          *Record
	Err          error
}

// Check parses a record and verifies its signature.
func Check(jws, claimedAuditID string, opts VerifyOptions) Checked {
	rec, err := Verify(jws, opts)
	return Checked{JWS: jws, Claimed: claimedAuditID, Rec: rec, Err: err}
}

// CheckParallel is Check for each record, on up to workers goroutines
// (contiguous shares of the slice), in the order given.
func CheckParallel(jws, claimed []string, opts VerifyOptions, workers int) []Checked {
	out := make([]Checked, len(jws))
	claimedOf := func(i int) string {
		if i < len(claimed) {
			return claimed[i]
		}
		return ""
	}
	workers = max(1, min(workers, len(jws)))
	share := (len(jws) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(jws); lo += share {
		hi := min(lo+share, len(jws))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				out[i] = Check(jws[i], claimedOf(i), opts)
			}
		})
	}
	wg.Wait()
	return out
}

// AddChecked is Add for a record whose signature Check or CheckParallel
// already verified with this verifier's VerifyOptions; the Audit-ID,
// version, link and agent checks are made here, in chain order.
func (v *ChainVerifier) AddChecked(c Checked) (*Record, error) {
	if v.broken {
		return nil, v.res.Break
	}
	rec, problem, err := checkRecord(c, v.prev, v.opts)
	if err != nil {
		id := ""
		if c.JWS != "" {
			id = AuditID(c.JWS)
		}
		want := v.prev
		if problem == ProblemAuditIDMismatch {
			want = c.Claimed
		}
		v.fail(&Break{Index: v.res.Checked, AuditID: id, Expected: want, Problem: problem, Err: err})
		return nil, v.res.Break
	}
	if rec.Alg == AlgNone {
		v.res.Unsigned++
	}
	v.prev = rec.AuditID
	v.res.Head = rec.AuditID
	v.res.Checked++
	return rec, nil
}

func (v *ChainVerifier) fail(b *Break) {
	v.broken = true
	v.res.Valid = false
	v.res.Break = b
}

// Result returns the outcome so far.
func (v *ChainVerifier) Result() ChainResult { return v.res }

// checkRecord checks a record whose signature was checked, and its link
// to prev.
func checkRecord(c Checked, prev string, opts ChainOptions) (*Record, string, error) {
	rec, err := c.Rec, c.Err
	if err != nil {
		return nil, problemOf(err), err
	}
	if c.Claimed != "" && c.Claimed != rec.AuditID {
		return nil, ProblemAuditIDMismatch, fmt.Errorf("stored Audit-ID %s, computed %s", c.Claimed, rec.AuditID)
	}
	if rec.Payload.AuditRecordVersion != RecordVersion {
		return nil, ProblemVersion, fmt.Errorf("audit_record_version %q", rec.Payload.AuditRecordVersion)
	}
	if rec.Payload.PreviousAuditID != prev {
		return nil, ProblemBrokenLink, fmt.Errorf("previous_audit_id %q, want %s", rec.Payload.PreviousAuditID, prev)
	}
	if opts.AgentID != "" && rec.Payload.AgentID != opts.AgentID {
		return nil, ProblemAgentMismatch, fmt.Errorf("agent_id %q, want %q", rec.Payload.AgentID, opts.AgentID)
	}
	return rec, "", nil
}

func problemOf(err error) string {
	switch {
	case errors.Is(err, ErrAlgorithmRefused):
		return ProblemAlgorithmRefused
	case errors.Is(err, ErrUnknownKey):
		return ProblemUnknownKey
	case errors.Is(err, ErrBadSignature):
		return ProblemBadSignature
	}
	return ProblemMalformed
}

// VerifyChain checks a whole chain given oldest first.
func VerifyChain(records []string, opts ChainOptions) ChainResult {
	v := NewChainVerifier(opts)
	for _, r := range records {
		if _, err := v.Add(r, ""); err != nil {
			break
		}
	}
	return v.Result()
}

// FetchFunc returns the JWS of the record with the given Audit-ID, e.g.
// through INSPECT target=audit.
type FetchFunc func(ctx context.Context, auditID string) (string, error)

// WalkBack checks a chain from its head to its first record by following
// previous_audit_id, as a relying party does with INSPECT (core §7.2.4).
// Every fetched record must hash to the Audit-ID that named it, so a store
// cannot substitute records. The walk stops at ZeroAuditID (or
// opts.Start), after maxRecords records (0: no limit), or at the first
// break. Break.Index counts from the head (0 = head).
func WalkBack(ctx context.Context, head string, fetch FetchFunc, opts ChainOptions, maxRecords uint64) ChainResult {
	stop := opts.Start
	if stop == "" {
		stop = ZeroAuditID
	}
	res := ChainResult{Valid: true, Head: head}
	fail := func(b *Break) ChainResult {
		res.Valid = false
		res.Break = b
		return res
	}
	want := head
	for want != stop {
		if maxRecords > 0 && res.Checked >= maxRecords {
			return fail(&Break{Index: res.Checked, Expected: want, Problem: ProblemTooLong, Err: fmt.Errorf("more than %d records", maxRecords)})
		}
		if !IsAuditID(want) {
			return fail(&Break{Index: res.Checked, Expected: want, Problem: ProblemBrokenLink, Err: fmt.Errorf("%q is not an Audit-ID", want)})
		}
		if err := ctx.Err(); err != nil {
			return fail(&Break{Index: res.Checked, Expected: want, Problem: ProblemFetch, Err: err})
		}
		jws, err := fetch(ctx, want)
		if err != nil {
			return fail(&Break{Index: res.Checked, Expected: want, Problem: ProblemFetch, Err: err})
		}
		rec, err := Verify(jws, opts.VerifyOptions)
		if err != nil {
			return fail(&Break{Index: res.Checked, AuditID: AuditID(jws), Expected: want, Problem: problemOf(err), Err: err})
		}
		if rec.AuditID != want {
			return fail(&Break{Index: res.Checked, AuditID: rec.AuditID, Expected: want, Problem: ProblemAuditIDMismatch, Err: errors.New("fetched record does not hash to the requested Audit-ID")})
		}
		if rec.Payload.AuditRecordVersion != RecordVersion {
			return fail(&Break{Index: res.Checked, AuditID: rec.AuditID, Expected: RecordVersion, Problem: ProblemVersion, Err: fmt.Errorf("audit_record_version %q", rec.Payload.AuditRecordVersion)})
		}
		if opts.AgentID != "" && rec.Payload.AgentID != opts.AgentID {
			return fail(&Break{Index: res.Checked, AuditID: rec.AuditID, Expected: opts.AgentID, Problem: ProblemAgentMismatch, Err: fmt.Errorf("agent_id %q", rec.Payload.AgentID)})
		}
		if rec.Alg == AlgNone {
			res.Unsigned++
		}
		res.Checked++
		want = rec.Payload.PreviousAuditID
	}
	return res
}
