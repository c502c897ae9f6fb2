package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
)

// writePeerPKI makes a CA for "another suite" and a client certificate it
// issued for that suite's AGTP server (DNS name name).
func writePeerPKI(t *testing.T, name string) (caFile string, cert *tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peer suite CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "peer-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTrustedPeerSpeaksOnlyForTheNotificationsItDelivers: a trusted peer server is trusted
// "for its own agent" (a NOTIFY from that suite, a DELEGATE it forwards).
// Nothing ties the Agent-ID it names to that suite: it can name an agent
// registered only here and read that agent's private inbox as it.
func TestTrustedPeerSpeaksOnlyForTheNotificationsItDelivers(t *testing.T) {
	caFile, peerCert := writePeerPKI(t, "agtp.peer.example")
	c := Start(t, Options{InProcess: true, Env: []string{"AGTP_TRUSTED_PEER_CA_FILE=" + caFile, "AGTP_TRUSTED_PEER_NAMES=agtp.peer.example"}})
	victim := c.registerAgent(t, "local-only-victim", "orders:read")
	sender := c.registerAgent(t, "local-sender", "orders:read")
	if resp, body := c.call(t, sender, "NOTIFY", "/", `{"recipient":"`+victim+`","content":{"secret":"for the victim only"}}`); resp.Status/100 != 2 {
		t.Fatalf("NOTIFY = %d %v", resp.Status, body)
	}
	// The peer's word proves nothing beyond the NOTIFY it delivers.
	r := c.dialAGTPWith(t, peerCert).do(request(t, "QUERY", "/inbox", agtp.HeaderAgentID, victim))
	rec, _ := attribution.Parse(r.Header.Get(agtp.HeaderAttributionRecord))
	if r.Status != 401 {
		t.Errorf("another suite's server read local agent %s's inbox: %d %s (record agent_id %q verified_by %q peer_server %q), want 401",
			victim[:8], r.Status, r.Body, rec.Payload.AgentID, rec.Payload.VerifiedBy, rec.Payload.PeerServer)
	}
	// A NOTIFY it delivers still comes from the agent it names.
	n := c.dialAGTPWith(t, peerCert).do(withJSON(request(t, "NOTIFY", "/", agtp.HeaderAgentID, sender), `{"recipient":"`+victim+`","content":{"relayed":true}}`))
	rec, _ = attribution.Parse(n.Header.Get(agtp.HeaderAttributionRecord))
	if n.Status/100 != 2 || rec.Payload.AgentID != sender || rec.Payload.PeerServer != "agtp.peer.example" {
		t.Fatalf("the peer's NOTIFY = %d %s (record agent_id %q peer_server %q), want it delivered from the sender", n.Status, n.Body, rec.Payload.AgentID, rec.Payload.PeerServer)
	}
}

// delegatedOrdersYAML is an operator endpoint with method DELEGATE (a
// core method an operator may serve on its own paths) whose handler lists
// the caller's orders.
const delegatedOrdersYAML = `method: DELEGATE
path: /orders-handoff
description: Hands the caller's open orders over.
namespace: orders
semantic:
  intent: Hand the caller's orders to another agent.
  actor: agent
  outcome: The caller's orders are listed for hand-off.
  capability: discovery
  confidence: 0.9
  impact: informational
  is_idempotent: true
input_schema:
  $schema: https://json-schema.org/draft/2020-12/schema
  type: object
  properties:
    delegation_token: {type: string}
  additionalProperties: false
output_schema:
  type: object
  properties:
    orders: {type: array, items: {type: object}}
  required: [orders]
  additionalProperties: true
errors: []
handler:
  type: registered_function
  function: demo.orders.list
required_scopes: ["orders:read"]
`

// TestDelegationTokenProvesTheDelegatorOnlyToTheBuiltInDelegate: the
// caller stage takes any delegation_token the delegator's issuer key
// signed as level 3 proof of the delegator on every DELEGATE request,
// without its expiry, delegatee, scope or task (delegationSignedBy). Only
// the built-in DELEGATE / checks the rest. Whoever once saw a token of A
// (the delegatee, the sub-agent's host it was forwarded to) is A, without
// a certificate, on any other DELEGATE endpoint, forever.
func TestDelegationTokenProvesTheDelegatorOnlyToTheBuiltInDelegate(t *testing.T) {
	dir := demoEndpointsDir(t, map[string]string{"orders-handoff.yaml": delegatedOrdersYAML})
	c := Start(t, Options{InProcess: true, Env: []string{"AGTP_ENDPOINTS_DIR=" + dir}})
	victim, victimIssuer := c.registerAgentKey(t, "dlg-victim", "orders:read", "orders:write")
	other := c.registerAgent(t, "dlg-delegatee", "orders:read")
	if resp := c.dialAs(t, victim).do(withJSON(request(t, "CREATE", "/orders", agtp.HeaderIdempotencyKey, "dlg-victim-1"), `{"lines":[{"sku":"widget","quantity":1}]}`)); resp.Status/100 != 2 {
		t.Fatalf("the victim's own CREATE = %d %s", resp.Status, resp.Body)
	}
	// The victim's own call works with its certificate.
	if resp := c.dialAs(t, victim).do(withJSON(request(t, "DELEGATE", "/orders-handoff"), `{}`)); resp.Status != 200 {
		t.Fatalf("the victim's own DELEGATE /orders-handoff = %d %s", resp.Status, resp.Body)
	}
	// A token the victim signed long ago for another hop, expired a day ago.
	old := delegationToken(t, victimIssuer, victim, other, []string{"orders:read"}, `{"method":"QUERY","path":"/orders"}`, time.Now().Add(-24*time.Hour))
	resp := c.dialAGTPWith(t, nil).do(withJSON(request(t, "DELEGATE", "/orders-handoff", agtp.HeaderAgentID, victim), `{"delegation_token":"`+old+`"}`))
	rec, _ := attribution.Parse(resp.Header.Get(agtp.HeaderAttributionRecord))
	if resp.Status != 401 {
		t.Errorf("no certificate, an expired delegation token of the victim: DELEGATE /orders-handoff = %d %s (record agent_id %q verified_by %q level %d), want 401",
			resp.Status, resp.Body, rec.Payload.AgentID, rec.Payload.VerifiedBy, rec.Payload.VerificationLevel)
	}
	// Nor does it prove the victim to the built-in DELEGATE once expired.
	task := `{"method":"QUERY","path":"/orders"}`
	resp = c.dialAGTPWith(t, nil).do(withJSON(request(t, "DELEGATE", "/", agtp.HeaderAgentID, victim),
		`{"target_agent_id":"`+other+`","task":`+task+`,"authority_scope":["orders:read"],"delegation_token":"`+old+`"}`))
	if resp.Status != 401 {
		t.Errorf("an expired delegation token proved the victim to the built-in DELEGATE: %d %s, want 401", resp.Status, resp.Body)
	}
}
