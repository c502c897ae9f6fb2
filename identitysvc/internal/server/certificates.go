package server

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	"github.com/agtpsuite/agtp/identitysvc/reasons"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Reason tokens of IssueAgentCertificate refusals.
const (
	// ReasonAgentCANotConfigured: this registrar has no agent CA.
	ReasonAgentCANotConfigured = reasons.AgentCANotConfigured
	// ReasonAgentCAExpired: the agent CA's certificate has expired.
	ReasonAgentCAExpired = "agent-ca-expired"
	// ReasonCSRInvalid: the CSR does not parse, is not signed by the key
	// it carries, or carries a key the profile does not issue for.
	ReasonCSRInvalid = "csr-invalid"
	// ReasonIssuerSignatureInvalid: issuer_signature is not the Genesis
	// issuer key's signature of the request.
	ReasonIssuerSignatureInvalid = reasons.IssuerSignatureInvalid
	// ReasonLifetimeTooLong: lifetime_seconds is above the maximum.
	ReasonLifetimeTooLong = reasons.CertificateLifetimeTooLong
)

// AgentCA is the registrar's agent CA: the certificates of its file,
// issuing certificate first, and the issuing key. It must never be the
// suite's service CA, or an agent's certificate would pass as a service's.
type AgentCA struct {
	Chain []*x509.Certificate
	Key   crypto.Signer
}

// Check reports an agent CA that cannot issue usable Agent Certificates.
func (ca *AgentCA) Check() error {
	if len(ca.Chain) == 0 || ca.Key == nil {
		return errors.New("agent CA needs its certificate and its key")
	}
	c := ca.Chain[0]
	if !c.BasicConstraintsValid || !c.IsCA {
		return fmt.Errorf("agent CA certificate %q is not a CA certificate", c.Subject.CommonName)
	}
	if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("agent CA certificate %q may not sign certificates (no keyCertSign usage)", c.Subject.CommonName)
	}
	// Chain verification for client authentication checks every
	// certificate's extended usages, so a CA restricted to other usages
	// would issue certificates nobody accepts.
	if len(c.ExtKeyUsage) > 0 && !hasExtUsage(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !hasExtUsage(c.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return fmt.Errorf("agent CA certificate %q is restricted to usages without client authentication", c.Subject.CommonName)
	}
	return nil
}

func hasExtUsage(list []x509.ExtKeyUsage, u x509.ExtKeyUsage) bool {
	for _, v := range list {
		if v == u {
			return true
		}
	}
	return false
}

// IssueAgentCertificate issues a CA-issued Agent Certificate
// (docs/identity.md, "Registrar-issued certificates") to an active or
// deprecated agent, for the key that signed the CSR, when issuer_signature
// proves the caller holds the agent's Genesis issuer key. Every issuance
// is logged.
func (s *Server) IssueAgentCertificate(ctx context.Context, req *identityv1.IssueAgentCertificateRequest) (*identityv1.IssueAgentCertificateResponse, error) {
	ca := s.opts.AgentCA
	if ca == nil {
		return nil, grpcerr.New(codes.Unimplemented, ReasonAgentCANotConfigured,
			"this registrar issues no Agent Certificates: it has no agent CA (AGTP_AGENT_CA_CERT_FILE and AGTP_AGENT_CA_KEY_FILE); "+
				"an issuer-signed certificate needs none")
	}
	life, err := s.certLifetime(req.GetLifetimeSeconds())
	if err != nil {
		return nil, err
	}
	a, err := s.reg.Get(ctx, req.GetAgentId())
	if err != nil {
		return nil, err
	}
	id := a.Record.GetAgentId()
	if err := issuable(a.Record); err != nil {
		return nil, err
	}
	pub, err := agentcert.ParseCSR(req.GetCsr())
	if err != nil {
		return nil, grpcerr.InvalidArgument(ReasonCSRInvalid, err.Error())
	}
	if len(req.GetIssuerSignature()) != ed25519.SignatureSize {
		return nil, grpcerr.InvalidArgument(registry.ReasonParameterInvalid,
			"issuer_signature must be a 64-byte Ed25519 signature by the Genesis issuer key", "parameter", "issuer_signature")
	}
	issuer, err := s.issuerKey(ctx, a)
	if err != nil {
		return nil, err
	}
	if !agentcert.VerifyRequest(issuer, id, req.GetCsr(), req.GetIssuerSignature()) {
		// Logged like a refused lifecycle call: someone holding an mTLS
		// client certificate asked for an agent they cannot speak for.
		s.log.WarnContext(ctx, "agent certificate refused: issuer signature does not verify", "agent_id", id)
		return nil, grpcerr.PermissionDenied(ReasonIssuerSignatureInvalid,
			"issuer_signature is not the agent's Genesis issuer key's signature of \""+agentcert.RequestContext+
				"\\n\" + agent_id + \"\\n\" + hex(SHA-256(csr))")
	}
	if k, ok := pub.(ed25519.PublicKey); ok && k.Equal(issuer) {
		// The issuer key mints the agent's identity; an agent presenting
		// it at every TLS handshake would spread it to every host it runs
		// on.
		return nil, grpcerr.InvalidArgument(ReasonCSRInvalid,
			"the CSR's key is the agent's Genesis issuer key: an Agent Certificate is for a key of the agent's own")
	}
	now := s.opts.Now()
	issuing := ca.Chain[0]
	if !now.Before(issuing.NotAfter) {
		s.log.ErrorContext(ctx, "agent certificate refused: the agent CA has expired", "agent_id", id, "ca_not_after", issuing.NotAfter)
		return nil, grpcerr.FailedPrecondition(ReasonAgentCAExpired, "the registrar's agent CA expired at "+issuing.NotAfter.UTC().Format(time.RFC3339))
	}
	der, err := agentcert.IssueByCA(agentcert.Request{AgentID: id, PublicKey: pub, Lifetime: life, Now: now}, issuing, ca.Key)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("parse issued certificate: %w", err))
	}
	s.log.InfoContext(ctx, "agent certificate issued", "agent_id", id, "serial", cert.SerialNumber.Text(16),
		"not_after", cert.NotAfter.UTC().Format(time.RFC3339), "fingerprint", agentcert.Fingerprint(der))
	chain := make([][]byte, len(ca.Chain))
	for i, c := range ca.Chain {
		chain[i] = c.Raw
	}
	return &identityv1.IssueAgentCertificateResponse{Certificate: der, CaChain: chain, NotAfter: timestamppb.New(cert.NotAfter)}, nil
}

// certLifetime turns lifetime_seconds into the validity to issue: the
// default is agentcert.DefaultLifetime, or the maximum when that is
// shorter; more than the maximum is refused rather than cut, so a caller
// never holds a certificate shorter than it planned for without knowing.
func (s *Server) certLifetime(seconds uint32) (time.Duration, error) {
	maxLife := s.opts.AgentCertMaxLifetime
	if seconds == 0 {
		return min(agentcert.DefaultLifetime, maxLife), nil
	}
	life := time.Duration(seconds) * time.Second
	if life > maxLife {
		return 0, grpcerr.InvalidArgument(ReasonLifetimeTooLong,
			fmt.Sprintf("lifetime_seconds %d is longer than this registrar's maximum of %d (%s)", seconds, int64(maxLife/time.Second), maxLife),
			"max_lifetime_seconds", strconv.FormatInt(int64(maxLife/time.Second), 10))
	}
	return life, nil
}

// issuable refuses agents that must not get a certificate: the same
// states the front door refuses as callers (callerpolicy), since a
// certificate is only a way to call. Deprecated agents are still served.
func issuable(rec *identityv1.AgentRecord) error {
	id := rec.GetAgentId()
	state := callerpolicy.StateName(rec.GetStatus())
	switch rec.GetStatus() {
	case identityv1.AgentStatus_AGENT_STATUS_ACTIVE, identityv1.AgentStatus_AGENT_STATUS_DEPRECATED:
		return nil
	case identityv1.AgentStatus_AGENT_STATUS_SUSPENDED:
		return grpcerr.FailedPrecondition(callerpolicy.ReasonAgentSuspended,
			"agent "+id+" is suspended: REINSTATE it before asking for a certificate", "lifecycle_state", state)
	case identityv1.AgentStatus_AGENT_STATUS_RETIRED:
		return grpcerr.FailedPrecondition(callerpolicy.ReasonAgentRetired,
			"agent "+id+" is retired: a retired Agent-ID gets no certificate", "lifecycle_state", state)
	}
	return grpcerr.FailedPrecondition(callerpolicy.ReasonAgentNotActivated,
		"agent "+id+" is registered but not activated: ACTIVATE it before asking for a certificate", "lifecycle_state", state)
}

// issuerKey is the agent's Genesis issuer key: from the record, or, for a
// record written before records carried it, from the stored Genesis
// (verified again on load).
func (s *Server) issuerKey(ctx context.Context, a *registry.Agent) (ed25519.PublicKey, error) {
	if k := a.Record.GetIssuerPublicKey(); len(k) == ed25519.PublicKeySize {
		return ed25519.PublicKey(k), nil
	}
	g, err := s.reg.LoadGenesis(ctx, a.Record.GetAgentId())
	if err != nil {
		return nil, err
	}
	return g.IssuerPublicKey, nil
}
