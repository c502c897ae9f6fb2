package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
)

// agentCerts holds, by Agent-ID, the issuer-signed Agent Certificate of
// every agent the harness registered: the harness calls as those agents
// the way a real agent does, proving its Agent-ID at the handshake
// (docs/identity.md, "Proven callers"). The certificates verify on every
// suite, since their trust anchor is the agent's own Genesis.
var agentCerts sync.Map

// agentIssuers holds, by Agent-ID, the Genesis issuer key of every agent
// the harness registered, which lifecycle_auth genesis_issuer asks for.
var agentIssuers sync.Map

// issueAgentCert makes an Agent Certificate for a fresh key of the agent
// whose Genesis issuer is issuer, and remembers it.
func issueAgentCert(agentID string, issuer ed25519.PrivateKey) (*tls.Certificate, error) {
	agentIssuers.Store(agentID, issuer)
	if c, ok := agentCerts.Load(agentID); ok {
		return c.(*tls.Certificate), nil
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := agentcert.IssueByIssuer(agentcert.Request{AgentID: agentID, PublicKey: key.Public()}, issuer)
	if err != nil {
		return nil, fmt.Errorf("agent certificate for %s: %w", agentID, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	agentCerts.Store(agentID, cert)
	return cert, nil
}

// AgentCertificate is the Agent Certificate the harness holds for
// agentID, nil for an agent it did not register.
func AgentCertificate(agentID string) *tls.Certificate {
	if c, ok := agentCerts.Load(agentID); ok {
		return c.(*tls.Certificate)
	}
	return nil
}
