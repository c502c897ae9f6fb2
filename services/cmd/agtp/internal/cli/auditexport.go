package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// DefaultReconnects bounds the reconnects of a streamed verification
// (--reconnects) that make no progress in between.
const DefaultReconnects = 5

// errChainBroken stops a stream once the verifier found a break.
var errChainBroken = errors.New("chain broken")

// streamVerify verifies one chain as AuditService.ExportChain streams it
// (docs/cli.md, "Verifying through the audit service"): oldest first, each
// record as it arrives, resuming after a broken stream from the record
// after the last one verified.
type streamVerify struct {
	client  auditv1.AuditServiceClient
	agent   string
	vopts   attribution.VerifyOptions
	timeout time.Duration
	// from is --from: 0 or 1 verifies the whole retained chain.
	from       uint64
	reconnects int
	progress   *progress
	stderr     io.Writer

	started bool
	// target is the chain's length when the first stream began: the
	// verification ends there, whatever is appended meanwhile.
	target uint64
	head   string
	// anchorPending: --from SEQ waits for record SEQ-1 to anchor on.
	anchorPending bool
	v             *attribution.ChainVerifier
	// first is the sequence of the first record the verifier checked,
	// next the sequence the next record must carry.
	first, next uint64
	anchor      string
	brk         *attribution.Break
}

func runAuditVerifyGRPC(ctx context.Context, env Env, o *auditOptions, vopts attribution.VerifyOptions) int {
	cfg, err := adminTLS(o.conn.cacert, o.conn.cert, o.conn.key, o.serverName)
	if err != nil {
		return fail(env, err)
	}
	cfg.NextProtos = []string{"h2"}
	conn, err := grpc.NewClient(o.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return fail(env, fmt.Errorf("--grpc %s: %w", o.grpcAddr, err))
	}
	defer conn.Close()
	client := auditv1.NewAuditServiceClient(conn)
	if o.jwks != "" {
		vopts.Keys, err = loadKeyFile(o.jwks)
	} else {
		vopts.Keys, err = signingKeys(ctx, client, o.conn.timeout)
	}
	if err != nil {
		return fail(env, err)
	}
	sv := &streamVerify{client: client, agent: o.agent, vopts: vopts, timeout: o.conn.timeout, from: o.from,
		reconnects: o.reconnects, stderr: env.Stderr, progress: newProgress(env.Stderr, o.verbose)}
	res, err := sv.run(ctx)
	sv.progress.finish(res.Checked)
	if err != nil {
		return fail(env, err)
	}
	code := report(env, "chain "+o.agent, res, "(sequence number)")
	if sv.anchor != "" {
		fmt.Fprintf(env.Stdout, "  %s\n", sv.anchor)
	}
	return code
}

// signingKeys asks the audit service for its JWKS.
func signingKeys(ctx context.Context, c auditv1.AuditServiceClient, timeout time.Duration) (attribution.KeyResolver, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.GetSigningKeys(ctx, &auditv1.GetSigningKeysRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetSigningKeys: %w", err)
	}
	//lint:ignore SA1019 the first release's auditsvc sends the JWKS only as bytes
	jwks, err := jsondoc.PreferStruct(resp.GetJwks(), resp.GetJwksJson())
	if err != nil {
		return nil, fmt.Errorf("GetSigningKeys: %w", err)
	}
	keys, err := attribution.ParseJWKS(jwks)
	if err != nil {
		return nil, fmt.Errorf("GetSigningKeys: %w", err)
	}
	return keys, nil
}

// run streams until the chain is verified up to the length it had at the
// start, a record breaks it, or the stream fails more than reconnects
// times in a row without progress. A broken chain is a result, not an
// error.
func (sv *streamVerify) run(ctx context.Context) (attribution.ChainResult, error) {
	failures := 0
	for {
		before := sv.next
		err := sv.stream(ctx)
		switch {
		case err == nil:
			return sv.result(), nil
		case errors.Is(err, errChainBroken):
			return sv.result(), nil
		case ctx.Err() != nil || !resumable(err):
			return sv.result(), err
		}
		progressed := sv.next > before
		if progressed {
			failures = 0
		}
		failures++
		if failures > sv.reconnects {
			return sv.result(), fmt.Errorf("gave up after %d attempts without progress: %w", failures, err)
		}
		// A stream that made progress until its --timeout is the expected
		// way through a chain longer than one timeout: said only with -v.
		if !progressed || status.Code(err) != codes.DeadlineExceeded || sv.progress.on {
			sv.progress.note(fmt.Sprintf("stream interrupted before sequence %d (%v); resuming (attempt %d of %d)",
				sv.next, status.Code(err), failures, sv.reconnects))
		}
		delay := min(100*time.Millisecond<<(failures-1), 5*time.Second)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return sv.result(), ctx.Err()
		case <-t.C:
		}
	}
}

// resumable reports a stream failure that a new stream may get past: the
// connection broke, the server was unavailable, or the stream reached its
// --timeout.
func resumable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// stream runs one ExportChain call under its own --timeout.
func (sv *streamVerify) stream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sv.timeout)
	defer cancel()
	req := &auditv1.ExportChainRequest{AgentId: sv.agent, FromSequence: sv.next, ToSequence: sv.target}
	if !sv.started && sv.from > 1 {
		// Ask for the record before --from too, to anchor on.
		req.FromSequence = sv.from - 1
	}
	st, err := sv.client.ExportChain(ctx, req)
	if err != nil {
		return fmt.Errorf("ExportChain: %w", err)
	}
	msg, err := st.Recv()
	if err != nil {
		return fmt.Errorf("ExportChain: %w", err)
	}
	if msg.GetStart() == nil {
		return errors.New("ExportChain: the first message names no start")
	}
	if err := sv.begin(msg.GetStart()); err != nil {
		return err
	}
	if err := sv.addBatch(msg.GetRecords()); err != nil {
		return err
	}
	for {
		msg, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return sv.end()
		}
		if err != nil {
			return fmt.Errorf("ExportChain: %w", err)
		}
		if err := sv.addBatch(msg.GetRecords()); err != nil {
			return err
		}
	}
}

// addBatch verifies one message's records: their signatures, the costly
// part, on one worker per CPU, then each in chain order (sequence,
// Audit-ID, link) as add does.
func (sv *streamVerify) addBatch(rs []*auditv1.ExportedRecord) error {
	jws, claimed := make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		jws[i], claimed[i] = r.GetJws(), r.GetAuditId()
	}
	checks := attribution.CheckParallel(jws, claimed, sv.vopts, runtime.GOMAXPROCS(0))
	for i, r := range rs {
		if err := sv.add(r, checks[i]); err != nil {
			return err
		}
	}
	return nil
}

// begin reads a stream's start. On the first stream it fixes the target
// and the anchor: the checkpoint, record --from minus one, or the zero
// Audit-ID before record 1.
func (sv *streamVerify) begin(s *auditv1.ExportChainStart) error {
	cp := s.GetCheckpoint()
	if sv.started {
		if cp != nil && cp.GetLastSequence() >= sv.next {
			return fmt.Errorf("records up to sequence %d were moved to the archive during the verification; run again with --from %d, and check the archive with --export",
				cp.GetLastSequence(), sv.next)
		}
		return nil
	}
	sv.started = true
	sv.target, sv.head = s.GetLength(), s.GetHeadAuditId()
	opts := attribution.ChainOptions{VerifyOptions: sv.vopts, AgentID: sv.agent}
	from := max(sv.from, 1)
	if from-1 > sv.target {
		return fmt.Errorf("--from %d: the chain has %d records", sv.from, sv.target)
	}
	switch {
	case cp != nil && cp.GetLastSequence() >= from-1:
		if cp.GetLastSequence() > from-1 && sv.from > 1 {
			return fmt.Errorf("--from %d: records up to sequence %d were moved to the archive; verify them with --export, and the store from --from %d",
				sv.from, cp.GetLastSequence(), cp.GetLastSequence()+1)
		}
		c, err := attribution.VerifyCheckpoint(cp.GetJws(), s.GetStream(), sv.agent, sv.vopts)
		if err == nil && (c.Sequence != cp.GetLastSequence() || c.AuditID != cp.GetLastAuditId()) {
			err = fmt.Errorf("%w: the signed checkpoint says sequence %d, %s; the message %d, %s", attribution.ErrCheckpoint,
				c.Sequence, c.AuditID, cp.GetLastSequence(), cp.GetLastAuditId())
		}
		if err != nil {
			sv.first, sv.next = cp.GetLastSequence()+1, cp.GetLastSequence()+1
			sv.brk = &attribution.Break{Index: sv.first, Problem: attribution.ProblemCheckpoint, Err: err}
			return errChainBroken
		}
		opts.Start = c.AuditID
		sv.v = attribution.NewChainVerifier(opts)
		sv.first, sv.next = c.Sequence+1, c.Sequence+1
		sv.anchor = fmt.Sprintf("anchored at the signed checkpoint after sequence %d (records 1 to %d are in the archive: check them with --export)",
			c.Sequence, c.Sequence)
	case from > 1:
		sv.anchorPending = true
		sv.first, sv.next = from, from-1
	default:
		sv.v = attribution.NewChainVerifier(opts)
		sv.first, sv.next = 1, 1
	}
	return nil
}

// add verifies the next record, whose signature c checked.
func (sv *streamVerify) add(r *auditv1.ExportedRecord, c attribution.Checked) error {
	if sv.next > sv.target {
		return nil
	}
	if r.GetSequence() != sv.next {
		sv.brk = &attribution.Break{Index: sv.next, AuditID: r.GetAuditId(), Expected: strconv.FormatUint(sv.next, 10),
			Problem: attribution.ProblemSequenceGap, Err: fmt.Errorf("record %d is missing (next sent is %d)", sv.next, r.GetSequence())}
		return errChainBroken
	}
	if sv.anchorPending {
		// Record --from minus one: its signature and Audit-ID are checked,
		// its own link is not; record --from must link to it.
		rec, err := c.Rec, c.Err
		if err == nil && rec.AuditID != r.GetAuditId() {
			err = fmt.Errorf("stored Audit-ID %s, computed %s", r.GetAuditId(), rec.AuditID)
		}
		if err != nil {
			sv.brk = &attribution.Break{Index: sv.next, AuditID: r.GetAuditId(), Problem: attribution.ProblemMalformed,
				Err: fmt.Errorf("the record --from anchors on does not verify: %w", err)}
			return errChainBroken
		}
		sv.anchorPending = false
		sv.v = attribution.NewChainVerifier(attribution.ChainOptions{VerifyOptions: sv.vopts, AgentID: sv.agent, Start: rec.AuditID})
		sv.anchor = fmt.Sprintf("anchored at record %d (%s), whose signature was checked; earlier records were not", sv.next, rec.AuditID)
		sv.next++
		return nil
	}
	if _, err := sv.v.AddChecked(c); err != nil {
		return errChainBroken
	}
	sv.next++
	sv.progress.tick(sv.v.Result().Checked, sv.target-sv.first+1)
	return nil
}

// end checks that a stream that ended delivered every record up to the
// target.
func (sv *streamVerify) end() error {
	if sv.next <= sv.target {
		sv.brk = &attribution.Break{Index: sv.next, Expected: strconv.FormatUint(sv.next, 10), Problem: attribution.ProblemSequenceGap,
			Err: fmt.Errorf("the chain had %d records, the export ends before record %d", sv.target, sv.next)}
		return errChainBroken
	}
	return nil
}

// result is the verification so far, its break indexed by sequence.
func (sv *streamVerify) result() attribution.ChainResult {
	var res attribution.ChainResult
	if sv.v != nil {
		res = sv.v.Result()
		if res.Break != nil {
			b := *res.Break
			b.Index += sv.first
			res.Break = &b
		}
	}
	switch {
	case sv.brk != nil:
		res.Valid, res.Break = false, sv.brk
	case sv.v == nil:
		// The stream ended before the record to anchor on came.
		res.Valid = false
		res.Break = &attribution.Break{Index: sv.next, Expected: strconv.FormatUint(sv.next, 10), Problem: attribution.ProblemFetch,
			Err: fmt.Errorf("record %d, to anchor on, was not sent", sv.next)}
	case res.Valid && sv.started && sv.next > sv.target && sv.target >= sv.first && res.Head != sv.head:
		res.Valid = false
		res.Break = &attribution.Break{Index: sv.target, AuditID: res.Head, Expected: sv.head, Problem: attribution.ProblemHeadMismatch,
			Err: errors.New("the head does not name the newest record")}
	}
	return res
}

// progress shows records verified and the rate on stderr: in place, a
// few times a second, when stderr is a terminal; a line a second with -v
// otherwise; nothing else.
type progress struct {
	w          io.Writer
	tty, on    bool
	begin      time.Time
	last       time.Time
	every      time.Duration
	ticks      uint64
	lastRecord uint64
}

func newProgress(w io.Writer, verbose bool) *progress {
	tty := isTerminal(w)
	p := &progress{w: w, tty: tty, on: tty || verbose, begin: time.Now(), every: time.Second}
	if tty {
		p.every = 250 * time.Millisecond
	}
	p.last = p.begin
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// tick counts one record; the clock is read every 256 records.
func (p *progress) tick(done, total uint64) {
	p.ticks++
	if !p.on || p.ticks%256 != 0 {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < p.every {
		return
	}
	rate := float64(done-p.lastRecord) / now.Sub(p.last).Seconds()
	p.last, p.lastRecord = now, done
	pct := 100 * float64(done) / float64(max(total, 1))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kverified %d of %d records (%.0f%%), %.0f records/s", done, total, pct, rate)
		return
	}
	fmt.Fprintf(p.w, "verified %d of %d records (%.0f%%), %.0f records/s\n", done, total, pct, rate)
}

// note prints a message between progress updates.
func (p *progress) note(msg string) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "agtp audit verify: %s\n", msg)
}

// finish prints the total and the mean rate.
func (p *progress) finish(done uint64) {
	if !p.on {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	d := time.Since(p.begin)
	fmt.Fprintf(p.w, "verified %d records in %v, %.0f records/s\n", done, d.Round(time.Millisecond), float64(done)/max(d.Seconds(), 1e-9))
}
