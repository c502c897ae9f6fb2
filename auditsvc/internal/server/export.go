package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Batch sizes of ExportChain: records per message and per XRANGE.
const (
	DefaultExportBatch = 256
	MaxExportBatch     = 1000
)

// ExportChain streams one chain oldest first (docs/audit.md, "Exporting a
// chain"). Memory is bounded by one batch: each batch is one XRANGE, and
// Send blocks while the client's flow-control window is full, so a slow
// reader slows the reads instead of queueing records here.
func (s *Server) ExportChain(req *auditv1.ExportChainRequest, ss grpc.ServerStreamingServer[auditv1.ExportChainResponse]) error {
	ctx := ss.Context()
	c, err := chainOf(req.GetAgentId())
	if err != nil {
		return err
	}
	stream := req.GetStream()
	if stream == "" {
		stream = attribution.StreamAttribution
	}
	if !chain.ValidStreamName(stream) {
		return grpcerr.InvalidArgument("stream-invalid", "stream must be a lowercase token")
	}
	batch := int64(req.GetBatchSize())
	switch {
	case batch < 0:
		return grpcerr.InvalidArgument("batch-size-invalid", "batch_size must not be negative")
	case batch == 0:
		batch = DefaultExportBatch
	case batch > MaxExportBatch:
		batch = MaxExportBatch
	}
	if to := req.GetToSequence(); to > 0 && to < req.GetFromSequence() {
		return grpcerr.InvalidArgument("sequence-range-invalid", "to_sequence is below from_sequence")
	}
	var since, until time.Time
	if t := req.GetSince(); t != nil {
		if err := t.CheckValid(); err != nil {
			return grpcerr.InvalidArgument("time-range-invalid", "since: "+err.Error())
		}
		since = t.AsTime()
	}
	if t := req.GetUntil(); t != nil {
		if err := t.CheckValid(); err != nil {
			return grpcerr.InvalidArgument("time-range-invalid", "until: "+err.Error())
		}
		until = t.AsTime()
		if !since.IsZero() && !until.After(since) {
			return grpcerr.InvalidArgument("time-range-invalid", "until must be after since")
		}
	}

	head, length, err := s.store.Head(ctx, stream, c)
	if err != nil {
		return storeErr(ctx, err, "chain-not-found", "no such chain")
	}
	vopts := s.chainOptions(stream, c).VerifyOptions
	cp, err := s.store.Checkpoint(ctx, stream, c, vopts)
	if err != nil {
		return checkpointErr(ctx, err)
	}
	start := &auditv1.ExportChainStart{HeadAuditId: head, Length: length, FirstRetainedSequence: 1, Stream: stream}
	if cp != nil {
		start.FirstRetainedSequence = cp.Sequence + 1
		start.Checkpoint = &auditv1.ExportCheckpoint{LastSequence: cp.Sequence, LastAuditId: cp.AuditID, Jws: cp.JWS}
	}
	// A range that starts in the archive starts at the first retained
	// record; start.first_retained_sequence tells the client so.
	next := max(req.GetFromSequence(), start.FirstRetainedSequence)
	last := length
	if to := req.GetToSequence(); to > 0 && to < last {
		last = to
	}
	if err := ss.Send(&auditv1.ExportChainResponse{Start: start}); err != nil {
		return err
	}
	for next <= last {
		es, err := s.store.Range(ctx, stream, c, next, min(batch, int64(last-next+1)))
		if err != nil {
			return storeErr(ctx, err, "chain-not-found", "no such chain")
		}
		if len(es) == 0 || es[0].Sequence != next {
			// Either a record is missing, which the client reports as a
			// sequence gap, or the retention moved records past this
			// export's position while it ran, which is not a gap.
			if err := s.movedWhileExporting(ctx, stream, c, next, vopts); err != nil {
				return err
			}
			if len(es) == 0 {
				return nil
			}
		}
		msg := &auditv1.ExportChainResponse{Records: make([]*auditv1.ExportedRecord, 0, len(es))}
		done := false
		for _, e := range es {
			if !until.IsZero() && !e.StoredAt.Before(until) {
				done = true
				break
			}
			if !since.IsZero() && e.StoredAt.Before(since) {
				continue
			}
			msg.Records = append(msg.Records, &auditv1.ExportedRecord{
				Sequence: e.Sequence, AuditId: e.AuditID, Jws: e.JWS,
				StreamId: strconv.FormatUint(e.Sequence, 10) + "-0", StoredAt: timestamppb.New(e.StoredAt),
			})
		}
		if len(msg.Records) > 0 {
			if err := ss.Send(msg); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
		next = es[len(es)-1].Sequence + 1
	}
	return nil
}

// movedWhileExporting refuses to go on when the checkpoint now covers
// sequence next: the records were moved to the archive during the export.
func (s *Server) movedWhileExporting(ctx context.Context, stream, c string, next uint64, vopts attribution.VerifyOptions) error {
	cp, err := s.store.Checkpoint(ctx, stream, c, vopts)
	if err != nil {
		return checkpointErr(ctx, err)
	}
	if cp != nil && cp.Sequence >= next {
		return grpcerr.FailedPrecondition("audit-export-archived",
			fmt.Sprintf("records up to sequence %d were moved to the archive while the export ran; export again from sequence %d, or read the archive", cp.Sequence, cp.Sequence+1))
	}
	return nil
}

// checkpointErr maps a failed checkpoint read to a status error: a
// checkpoint that does not verify is data loss, not a client error.
func checkpointErr(ctx context.Context, err error) error {
	if errors.Is(err, chain.ErrCheckpoint) {
		return grpcerr.New(codes.DataLoss, "audit-checkpoint-invalid", err.Error())
	}
	return storeErr(ctx, err, "chain-not-found", "no such chain")
}
