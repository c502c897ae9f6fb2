// Package demo makes the suite's demo agent: an Ed25519 issuer key and a
// signed Agent Genesis for "demo-agent", created once in a state
// directory and reused on every later start, so `make run` registers the
// same Agent-ID every time.
//
// The Genesis is self-issued (the agent's key is also the issuer key),
// which core §6.5.2 allows for development only, and Tier 2
// (org-asserted), since nothing about it is verified.
package demo

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/reasons"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/keyfile"
)

// Name is the demo agent's label.
const Name = "demo-agent"

// File names inside the state directory.
const (
	KeyFile     = "demo-agent.key"          // PKCS#8 PEM, mode 0600
	GenesisFile = "demo-agent.genesis.json" // the signed Genesis
)

// Scopes are the demo agent's declared Authority-Scope set.
var Scopes = []string{"orders:read", "orders:write", "payments:purchase", "authorization:grant", "documents:read", "reports:run"}

// Agent is the demo agent's material.
type Agent struct {
	Name        string
	AgentID     string
	Genesis     *genesis.Genesis
	PrivateKey  ed25519.PrivateKey
	KeyPath     string
	GenesisPath string
	// Created is true when this call made the key and Genesis.
	Created bool
}

// Template is the demo agent's Genesis content.
func Template() genesis.Template {
	return genesis.Template{
		Owner:            "AGTP suite demo",
		Archetype:        genesis.ArchetypeExecutor,
		GovernanceZone:   "development",
		Scope:            Scopes,
		TrustTier:        genesis.TierOrgAsserted,
		VerificationPath: genesis.PathOrgAsserted,
		OrgLabel:         Name,
		PackageRef:       "demo-agent.agent",
	}
}

// Ensure returns the demo agent from stateDir, creating the key and the
// Genesis the first time. An existing Genesis is loaded and verified, and
// must be issued by the stored key; a Genesis without its key is an error
// rather than silently replaced, since replacing it changes the Agent-ID.
func Ensure(stateDir string) (*Agent, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	a := &Agent{Name: Name, KeyPath: filepath.Join(stateDir, KeyFile), GenesisPath: filepath.Join(stateDir, GenesisFile)}

	key, err := keyfile.ReadEd25519(a.KeyPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(a.GenesisPath); serr == nil {
			return nil, fmt.Errorf("demo agent: %s exists but its key %s is missing; remove both to start over", a.GenesisPath, a.KeyPath)
		}
		if key, err = WriteNewKey(a.KeyPath); err != nil {
			return nil, fmt.Errorf("demo agent: %w", err)
		}
		a.Created = true
	case err != nil:
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	a.PrivateKey = key

	data, err := os.ReadFile(a.GenesisPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		g, err := genesis.Create(Template(), key)
		if err != nil {
			return nil, fmt.Errorf("demo agent: %w", err)
		}
		if err := WriteFileAtomic(a.GenesisPath, append(g.Bytes(), '\n'), 0o644); err != nil {
			return nil, fmt.Errorf("demo agent: %w", err)
		}
		a.Genesis, a.Created = g, true
	case err != nil:
		return nil, fmt.Errorf("demo agent: %w", err)
	default:
		// The trailing newline is not part of the document.
		for len(data) > 0 && (data[len(data)-1] == '\n' || data[len(data)-1] == '\r') {
			data = data[:len(data)-1]
		}
		g, err := genesis.Load(data)
		if err != nil {
			return nil, fmt.Errorf("demo agent: %s: %w", a.GenesisPath, err)
		}
		if !g.IssuerPublicKey.Equal(key.Public()) {
			return nil, fmt.Errorf("demo agent: %s is not issued by the key in %s", a.GenesisPath, a.KeyPath)
		}
		a.Genesis = g
	}
	a.AgentID = a.Genesis.AgentID
	return a, nil
}

// Request is the registration of the demo agent, activated at once.
func (a *Agent) Request() *identityv1.RegisterGenesisRequest {
	return &identityv1.RegisterGenesisRequest{Genesis: string(a.Genesis.Bytes()), Name: a.Name, Activate: true}
}

// AlreadyRegistered reports whether a registration error only says the
// demo agent is registered already (the normal case after the first
// start).
func AlreadyRegistered(err error) bool {
	_, reason, _, _ := grpcerr.Reason(err)
	return reason == reasons.AgentIDCollision
}

// Register registers the demo agent through an identity client. It
// reports whether this call registered it; an existing registration is
// not an error.
func (a *Agent) Register(ctx context.Context, c identityv1.IdentityServiceClient) (bool, error) {
	_, err := c.RegisterGenesis(ctx, a.Request())
	if err == nil {
		return true, nil
	}
	if AlreadyRegistered(err) {
		return false, nil
	}
	return false, fmt.Errorf("register demo agent: %w", err)
}

// WriteNewKey generates an Ed25519 key and writes it to path as PKCS#8
// PEM, mode 0600, replacing any file there.
func WriteNewKey(path string) (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	if err := WriteFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return priv, nil
}

// WriteFileAtomic writes through a temporary file and a rename, so a
// crash never leaves half a key or half a Genesis behind.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Certificate file names inside the state directory: the demo agent's
// Agent Certificate and the key it is for.
const (
	CertFile      = "agent-cert.pem"
	AgentKeyFile  = "agent-key.pem"
	certRenewalAt = time.Hour
)

// EnsureCertificate gives the demo agent an issuer-signed Agent
// Certificate (docs/identity.md) for a key of its own, in stateDir: the
// key is made once, and the certificate issued again whenever the one
// there expires within the hour, so every start of `make run` leaves one
// the README walkthrough can use for a day.
func (a *Agent) EnsureCertificate(stateDir string, now time.Time) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(stateDir, CertFile), filepath.Join(stateDir, AgentKeyFile)
	key, err := keyfile.ReadEd25519(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = WriteNewKey(keyPath)
	}
	if err != nil {
		return "", "", fmt.Errorf("demo agent certificate: %w", err)
	}
	if b, err := os.ReadFile(certPath); err == nil {
		if blk, _ := pem.Decode(b); blk != nil {
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil && samePublicKey(c.PublicKey, key.Public().(ed25519.PublicKey)) &&
				agentcert.VerifyIssuerSigned(c, a.Genesis.IssuerPublicKey, now.Add(certRenewalAt)) == nil {
				return certPath, keyPath, nil
			}
		}
	}
	der, err := agentcert.IssueByIssuer(agentcert.Request{AgentID: a.AgentID, PublicKey: key.Public(), Now: now}, a.PrivateKey)
	if err != nil {
		return "", "", fmt.Errorf("demo agent certificate: %w", err)
	}
	if err := WriteFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("demo agent certificate: %w", err)
	}
	return certPath, keyPath, nil
}

func samePublicKey(a any, b ed25519.PublicKey) bool {
	k, ok := a.(ed25519.PublicKey)
	return ok && k.Equal(b)
}
