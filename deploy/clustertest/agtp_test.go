package clustertest

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/e2e"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// agtpConn is one persistent TLS connection to a front door; after an
// error it is closed and the next request dials again.
type agtpConn struct {
	addr  string
	roots *x509.CertPool
	conn  *tls.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
}

func newConn(c *e2e.Cluster) *agtpConn {
	return &agtpConn{addr: c.Procs["frontdoor"].AGTPAddr, roots: c.Admin.Pool()}
}

func (a *agtpConn) do(req *agtp.Request, timeout time.Duration) (*agtp.Response, error) {
	if a.conn == nil {
		d := &net.Dialer{Timeout: timeout}
		conn, err := tls.DialWithDialer(d, "tcp", a.addr, agtp.ClientTLSConfig("localhost", a.roots))
		if err != nil {
			return nil, err
		}
		a.conn, a.br, a.bw = conn, bufio.NewReader(conn), bufio.NewWriter(conn)
	}
	_ = a.conn.SetDeadline(time.Now().Add(timeout))
	resp, err := func() (*agtp.Response, error) {
		if err := req.Write(a.bw); err != nil {
			return nil, err
		}
		if err := a.bw.Flush(); err != nil {
			return nil, err
		}
		return agtp.ReadResponse(a.br, agtp.Limits{MaxBody: 16 << 20})
	}()
	if err != nil {
		a.close()
	}
	return resp, err
}

func (a *agtpConn) close() {
	if a.conn != nil {
		_ = a.conn.Close()
		a.conn = nil
	}
}

// roundTrip sends one request on a fresh connection and fails the test on
// a transport error.
func roundTrip(t *testing.T, c *e2e.Cluster, req *agtp.Request) *agtp.Response {
	t.Helper()
	conn := newConn(c)
	defer conn.close()
	resp, err := conn.do(req, 10*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.Target, err)
	}
	return resp
}

func request(t testing.TB, method, target string, headers ...string) *agtp.Request {
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

func reason(resp *agtp.Response) string {
	var m struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(resp.Body, &m)
	return m.Reason
}

// registerAgent registers and activates an agent through identitysvc.
func registerAgent(t *testing.T, c *e2e.Cluster, name string, scopes ...string) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g, err := genesis.Create(genesis.Template{
		Owner: "clustertest@example.test", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "development",
		Scope: scopes, TrustTier: genesis.TierOrgAsserted, VerificationPath: genesis.PathOrgAsserted, OrgLabel: name,
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := identityv1.NewIdentityServiceClient(c.Dial(t, "identitysvc")).RegisterGenesis(ctx,
		&identityv1.RegisterGenesisRequest{Genesis: string(g.Bytes()), Name: name, Activate: true})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	return resp.GetAgent().GetAgentId()
}

// signingKeys fetches the JWKS from a front door's HTTPS side.
func signingKeys(t *testing.T, c *e2e.Cluster) attribution.PublicKeys {
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

func orderBody(n int) string {
	return fmt.Sprintf(`{"lines":[{"sku":"gadget","quantity":%d}]}`, 1+n%1000)
}
