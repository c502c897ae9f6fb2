package identitysvc

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/internal/server"
)

// loadAgentCA reads the agent CA of AgentCACertFile and AgentCAKeyFile;
// nil, nil when neither is set. It refuses a CA that is, or is issued
// by, the service CA of CAFile: every service accepts client certificates
// chaining to the service CA, so an agent holding one could call the
// internal APIs as a service.
func (c Config) loadAgentCA() (*server.AgentCA, error) {
	if c.AgentCACertFile == "" && c.AgentCAKeyFile == "" {
		return nil, nil
	}
	if c.AgentCACertFile == "" || c.AgentCAKeyFile == "" {
		return nil, errors.New("the agent CA needs both its certificate (AGTP_AGENT_CA_CERT_FILE) and its key (AGTP_AGENT_CA_KEY_FILE)")
	}
	pair, err := tls.LoadX509KeyPair(c.AgentCACertFile, c.AgentCAKeyFile)
	if err != nil {
		return nil, fmt.Errorf("agent CA %s: %w", c.AgentCACertFile, err)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("agent CA key %s is %T, which cannot sign", c.AgentCAKeyFile, pair.PrivateKey)
	}
	ca := &server.AgentCA{Key: key}
	for _, der := range pair.Certificate {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("agent CA %s: %w", c.AgentCACertFile, err)
		}
		ca.Chain = append(ca.Chain, cert)
	}
	if err := ca.Check(); err != nil {
		return nil, fmt.Errorf("agent CA %s: %w", c.AgentCACertFile, err)
	}
	if na := ca.Chain[0].NotAfter; time.Now().After(na) {
		return nil, fmt.Errorf("agent CA %s expired at %s", c.AgentCACertFile, na.UTC().Format(time.RFC3339))
	}
	if c.CAFile == "" {
		return ca, nil
	}
	services, err := readCertificates(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("service CA (compared with the agent CA): %w", err)
	}
	for _, a := range ca.Chain {
		for _, s := range services {
			if bytes.Equal(a.RawSubjectPublicKeyInfo, s.RawSubjectPublicKeyInfo) {
				return nil, fmt.Errorf("agent CA %s is the service CA of %s (certificate %q has its key): "+
					"agents must never hold certificates the services trust; give identitysvc a CA of its own for agents",
					c.AgentCACertFile, c.CAFile, a.Subject.CommonName)
			}
			if a.CheckSignatureFrom(s) == nil {
				return nil, fmt.Errorf("agent CA %s is issued by the service CA of %s (certificate %q): "+
					"its Agent Certificates would chain to the CA the services trust; give identitysvc a CA outside the service PKI",
					c.AgentCACertFile, c.CAFile, a.Subject.CommonName)
			}
		}
	}
	return ca, nil
}

// readCertificates reads every certificate of a PEM bundle.
func readCertificates(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, cert)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return out, nil
}
