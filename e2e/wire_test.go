package e2e

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// agtpConn is one persistent TLS connection to the front door.
type agtpConn struct {
	t    *testing.T
	conn *tls.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
}

func (c *Cluster) dialAGTP(t *testing.T) *agtpConn {
	t.Helper()
	conn, err := tls.Dial("tcp", c.Procs["frontdoor"].AGTPAddr, agtp.ClientTLSConfig("localhost", c.Admin.Pool()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &agtpConn{t: t, conn: conn, br: bufio.NewReader(conn), bw: bufio.NewWriter(conn)}
}

// do sends a request and reads its response.
func (a *agtpConn) do(req *agtp.Request) *agtp.Response {
	a.t.Helper()
	_ = a.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := req.Write(a.bw); err != nil {
		a.t.Fatal(err)
	}
	if err := a.bw.Flush(); err != nil {
		a.t.Fatal(err)
	}
	resp, err := agtp.ReadResponse(a.br, agtp.Limits{MaxBody: 16 << 20})
	if err != nil {
		a.t.Fatal(err)
	}
	return resp
}

// roundTrip sends one request on a new connection. A request whose
// Agent-ID names an agent the harness registered is sent as that agent,
// with its Agent Certificate; others go without a client certificate.
func (c *Cluster) roundTrip(t *testing.T, req *agtp.Request) *agtp.Response {
	t.Helper()
	return c.dialAs(t, req.Header.Get(agtp.HeaderAgentID)).do(req)
}

// dialAs opens an AGTP connection as agent: with its Agent Certificate
// when the harness registered it, without a client certificate otherwise.
func (c *Cluster) dialAs(t *testing.T, agent string) *agtpConn {
	t.Helper()
	return c.dialAGTPWith(t, AgentCertificate(agent))
}

func request(t *testing.T, method, target string, headers ...string) *agtp.Request {
	t.Helper()
	req, err := agtp.NewRequest(method, target)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return req
}

func withJSON(req *agtp.Request, body string) *agtp.Request {
	req.Body = []byte(body)
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	return req
}

// call sends method path as agent (with a JSON body unless body is empty)
// on a new connection and returns the response with its decoded body.
func (c *Cluster) call(t *testing.T, agent, method, path, body string, headers ...string) (*agtp.Response, map[string]any) {
	t.Helper()
	req := request(t, method, path, append([]string{agtp.HeaderAgentID, agent}, headers...)...)
	if body != "" {
		withJSON(req, body)
	}
	resp := c.roundTrip(t, req)
	return resp, errorBody(t, resp)
}

// orderCount is how many demo orders agent sees (QUERY /orders).
func (c *Cluster) orderCount(t *testing.T, agent string) int {
	t.Helper()
	resp, body := c.call(t, agent, "QUERY", "/orders?limit=100", "")
	result, _ := body["result"].(map[string]any)
	orders, _ := result["orders"].([]any)
	if resp.Status != 200 {
		t.Fatalf("QUERY /orders = %d %s", resp.Status, resp.Body)
	}
	return len(orders)
}

// errorBody decodes an AGTP error body.
func errorBody(t *testing.T, resp *agtp.Response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", resp.Body, err)
	}
	return m
}

// agentTemplate is the Genesis template of a Tier 2 (org-asserted) test
// agent holding scopes.
func agentTemplate(name string, scopes ...string) genesis.Template {
	return genesis.Template{
		Owner: "e2e@example.test", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "development",
		Scope: scopes, TrustTier: genesis.TierOrgAsserted, VerificationPath: genesis.PathOrgAsserted, OrgLabel: name,
	}
}

// signGenesis creates a Genesis from tmpl with a fresh key.
func signGenesis(t *testing.T, tmpl genesis.Template) ([]byte, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g, err := genesis.Create(tmpl, priv)
	if err != nil {
		t.Fatal(err)
	}
	return g.Bytes(), priv
}

// registerGenesis registers and activates a Genesis with identitysvc and
// returns its canonical Agent-ID; issuer, the Genesis issuer key, gives
// the harness the agent's Agent Certificate.
func (c *Cluster) registerGenesis(t *testing.T, name string, genesisJSON []byte, issuer ed25519.PrivateKey) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := identityv1.NewIdentityServiceClient(c.Dial(t, "identitysvc")).RegisterGenesis(ctx,
		&identityv1.RegisterGenesisRequest{Genesis: string(genesisJSON), Name: name, Activate: true})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	id := resp.GetAgent().GetAgentId()
	if _, err := issueAgentCert(id, issuer); err != nil {
		t.Fatal(err)
	}
	return id
}

// registerAgent registers and activates a new Tier 2 agent with the given
// scopes and returns its canonical Agent-ID.
func (c *Cluster) registerAgent(t *testing.T, name string, scopes ...string) string {
	t.Helper()
	id, _ := c.registerAgentKey(t, name, scopes...)
	return id
}

// registerAgentKey is registerAgent that also returns the agent's key,
// which signs its delegation tokens.
func (c *Cluster) registerAgentKey(t *testing.T, name string, scopes ...string) (string, ed25519.PrivateKey) {
	t.Helper()
	g, priv := signGenesis(t, agentTemplate(name, scopes...))
	return c.registerGenesis(t, name, g, priv), priv
}

// signingKeys fetches the JWKS from the front door's HTTPS side.
func (c *Cluster) signingKeys(t *testing.T) attribution.PublicKeys {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool()}}}
	resp, err := hc.Get("https://" + c.Procs["frontdoor"].HTTPSAddr + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET jwks = %d %s", resp.StatusCode, b)
	}
	keys, err := attribution.ParseJWKS(b)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
