package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// SuspendSession pauses a session of the calling agent (core §7.2.12)
// and tells every watcher, so front doors stop serving the session.
func (s *Server) SuspendSession(ctx context.Context, req *identityv1.SuspendSessionRequest) (*identityv1.SuspendSessionResponse, error) {
	var resumeBy time.Time // zero: the default suspension
	if req.GetResumeBy() != nil {
		if err := req.GetResumeBy().CheckValid(); err != nil {
			return nil, grpcerr.InvalidArgument("resume-by-invalid", "resume_by is not a valid timestamp: "+err.Error())
		}
		resumeBy = req.GetResumeBy().AsTime()
	}
	//lint:ignore SA1019 the first release's front door sends the checkpoint only as bytes
	checkpoint := jsondoc.PreferString(req.GetCheckpoint(), req.GetCheckpointJson())
	// A caller that names no client key (the first release's front door)
	// is checked by agent only, as it was.
	susp, err := s.binder.Suspend(ctx, req.GetSessionId(), req.GetAgentId(), req.ClientKeyFingerprint, req.GetReason(), resumeBy, checkpoint)
	if err != nil {
		return nil, err
	}
	s.publishSession(ctx, req.GetAgentId(), req.GetSessionId())
	out := &identityv1.SuspendSessionResponse{
		SuspensionId: susp.ID, SessionId: req.GetSessionId(), ResumptionNonce: susp.Nonce,
		ResumeBy: timestamppb.New(susp.ResumeBy), SessionStatus: identityv1.SessionStatus_SESSION_STATUS_SUSPENDED,
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside SessionStatus
	out.Status = enumname.Of(out.SessionStatus)
	return out, nil
}

// ResumeSession resumes a suspended session with its single-use nonce.
func (s *Server) ResumeSession(ctx context.Context, req *identityv1.ResumeSessionRequest) (*identityv1.ResumeSessionResponse, error) {
	if req.GetResumptionNonce() == "" {
		return nil, grpcerr.InvalidArgument("resumption-nonce-required", "RESUME needs the resumption_nonce that SUSPEND returned")
	}
	id, checkpoint, err := s.binder.Resume(ctx, req.GetSessionId(), req.GetAgentId(), req.GetResumptionNonce())
	if err != nil {
		return nil, err
	}
	s.publishSession(ctx, req.GetAgentId(), req.GetSessionId())
	out := &identityv1.ResumeSessionResponse{
		SessionId: req.GetSessionId(), SuspensionId: id,
		SessionStatus: identityv1.SessionStatus_SESSION_STATUS_ACTIVE, Checkpoint: string(checkpoint),
	}
	//lint:ignore SA1019 the first release's fields, filled for its clients beside SessionStatus and Checkpoint
	out.Status, out.CheckpointJson = enumname.Of(out.SessionStatus), checkpoint
	return out, nil
}

// publishSession announces a session change on the registry's event
// channel; a lost notice only delays the change until a cache miss, since
// the binding check in Redis is authoritative.
func (s *Server) publishSession(ctx context.Context, agentID, sessionID string) {
	b, err := proto.Marshal(&identityv1.WatchAgentsResponse{AgentId: agentID, SessionId: sessionID})
	if err != nil {
		return
	}
	if err := s.hub.rdb.Publish(ctx, rediskeys.AgentEvents, b).Err(); err != nil {
		s.log.WarnContext(ctx, "session event not published", "err", err)
	}
}
