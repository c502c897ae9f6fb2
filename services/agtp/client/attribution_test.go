package client_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/testkit"
)

type signedFixture struct {
	keys   attribution.PublicKeys
	signer *attribution.Signer
	resp   *agtp.Response
}

func newSigned(t testing.TB) signedFixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	kid, err := attribution.KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	f := signedFixture{keys: attribution.PublicKeys{kid: pub}, signer: attribution.NewSigner(priv)}
	f.resp = f.sign(t, f.signer, agtp.StatusOK, `{"status":200,"result":{"ok":true}}`)
	return f
}

// sign builds a response the way the front door does: payload bound to
// status, Response-ID and body hash; Attribution-Record and Audit-ID set.
func (f signedFixture) sign(t testing.TB, s *attribution.Signer, status int, body string) *agtp.Response {
	t.Helper()
	sum := sha256.Sum256([]byte(body))
	resp := agtp.NewResponse(status, agtp.MediaTypeJSON, []byte(body))
	resp.Header.Set(agtp.HeaderResponseID, "r-1")
	jws, auditID, err := s.SignPayload(&attribution.Payload{
		ServerID: "s", Timestamp: "2026-01-01T00:00:00Z", Status: status, Method: "QUERY", ResponseID: "r-1",
		ResultHash: hex.EncodeToString(sum[:]), PreviousAuditID: attribution.ZeroAuditID, AuditRecordVersion: "1",
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Set(agtp.HeaderAttributionRecord, jws)
	resp.Header.Set(agtp.HeaderAuditID, auditID)
	return resp
}

func TestVerifyAttributionAcceptsARecordThatDescribesTheResponse(t *testing.T) {
	f := newSigned(t)
	rec, err := client.VerifyAttribution(f.resp, f.keys)
	if err != nil {
		t.Fatal(err)
	}
	if rec.AuditID != f.resp.Header.Get(agtp.HeaderAuditID) || rec.Alg != attribution.AlgEdDSA || rec.Payload.Method != "QUERY" {
		t.Fatalf("record %+v", rec)
	}
}

func TestVerifyAttributionRefusesTampering(t *testing.T) {
	otherPub, otherPriv, _ := ed25519.GenerateKey(nil)
	_ = otherPub
	for _, tc := range []struct {
		name   string
		tamper func(t testing.TB, f signedFixture, r *agtp.Response)
		want   error
	}{
		{"no record", func(_ testing.TB, _ signedFixture, r *agtp.Response) { r.Header.Del(agtp.HeaderAttributionRecord) }, client.ErrNoAttribution},
		{"no Audit-ID", func(_ testing.TB, _ signedFixture, r *agtp.Response) { r.Header.Del(agtp.HeaderAuditID) }, client.ErrAuditIDMismatch},
		{"Audit-ID of another record", func(_ testing.TB, _ signedFixture, r *agtp.Response) {
			r.Header.Set(agtp.HeaderAuditID, strings.Repeat("0", 64))
		}, client.ErrAuditIDMismatch},
		{"Audit-ID in upper case", func(_ testing.TB, _ signedFixture, r *agtp.Response) {
			r.Header.Set(agtp.HeaderAuditID, strings.ToUpper(r.Header.Get(agtp.HeaderAuditID)))
		}, client.ErrAuditIDMismatch},
		{"payload edited, Audit-ID recomputed", func(t testing.TB, _ signedFixture, r *agtp.Response) {
			parts := strings.Split(r.Header.Get(agtp.HeaderAttributionRecord), ".")
			payload, err := base64.RawURLEncoding.DecodeString(parts[1])
			if err != nil {
				t.Fatal(err)
			}
			parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"QUERY"`, `"EXECUTE"`, 1)))
			setRecord(r, strings.Join(parts, "."))
		}, attribution.ErrBadSignature},
		{"signature edited", func(_ testing.TB, _ signedFixture, r *agtp.Response) {
			parts := strings.Split(r.Header.Get(agtp.HeaderAttributionRecord), ".")
			parts[2] = flip(parts[2][:2]) + parts[2][2:]
			setRecord(r, strings.Join(parts, "."))
		}, attribution.ErrBadSignature},
		{"signed by an unknown key", func(t testing.TB, f signedFixture, r *agtp.Response) {
			*r = *f.sign(t, attribution.NewSigner(otherPriv), r.Status, string(r.Body))
		}, attribution.ErrUnknownKey},
		{"alg none", func(t testing.TB, f signedFixture, r *agtp.Response) {
			*r = *f.sign(t, attribution.NewSigner(nil), r.Status, string(r.Body))
		}, attribution.ErrAlgorithmRefused},
		{"status changed", func(_ testing.TB, _ signedFixture, r *agtp.Response) { r.Status = agtp.StatusAccepted }, client.ErrRecordMismatch},
		{"body changed", func(_ testing.TB, _ signedFixture, r *agtp.Response) {
			r.Body = []byte(`{"status":200,"result":{"ok":false}}`)
		}, client.ErrRecordMismatch},
		{"Response-ID changed", func(_ testing.TB, _ signedFixture, r *agtp.Response) { r.Header.Set(agtp.HeaderResponseID, "r-2") }, client.ErrRecordMismatch},
		// The suite signs other records with the same key: a lifecycle
		// event names no status, response or result, and must not stand
		// for any response.
		{"another kind of record", func(t testing.TB, f signedFixture, r *agtp.Response) {
			jws, auditID, err := f.signer.SignPayload(&attribution.Payload{ServerID: "s", Timestamp: "2026-01-01T00:00:00Z", AgentID: "agent-a",
				EventType: "agent-lifecycle-activated", PreviousAuditID: attribution.ZeroAuditID, AuditRecordVersion: "1"})
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set(agtp.HeaderAttributionRecord, jws)
			r.Header.Set(agtp.HeaderAuditID, auditID)
		}, client.ErrRecordMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSigned(t)
			tc.tamper(t, f, f.resp)
			_, err := client.VerifyAttribution(f.resp, f.keys)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVerifyAttributionAllowUnsignedIsExplicit(t *testing.T) {
	f := newSigned(t)
	resp := f.sign(t, attribution.NewSigner(nil), agtp.StatusOK, `{}`)
	if _, err := client.VerifyAttribution(resp, nil); !errors.Is(err, attribution.ErrAlgorithmRefused) {
		t.Fatalf("default: err = %v, want ErrAlgorithmRefused", err)
	}
	rec, err := client.VerifyAttributionWith(resp, client.AttributionOptions{AllowUnsigned: true})
	if err != nil || rec.Alg != attribution.AlgNone {
		t.Fatalf("AllowUnsigned: %v %+v", err, rec)
	}
}

func flip(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
	}
	return string(b)
}

func setRecord(r *agtp.Response, jws string) {
	r.Header.Set(agtp.HeaderAttributionRecord, jws)
	r.Header.Set(agtp.HeaderAuditID, attribution.AuditID(jws))
}

func TestFetchJWKSUsesTheSuiteCA(t *testing.T) {
	pki := testkit.PKI(t)
	ks, err := attribution.LoadKeySet(pki.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := ks.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(jwks)
	}))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's handshake failure
	hs.StartTLS()
	defer hs.Close()

	c := newClient(t, pki.CA(), client.Options{})
	keys, err := c.FetchJWKS(testContext(t), hs.URL+"/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := keys[ks.ActiveKID()]; !ok || len(keys) != 1 {
		t.Fatalf("keys %v, want the active kid %s", keys, ks.ActiveKID())
	}
	if _, err := c.FetchJWKS(testContext(t), hs.URL+"/missing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing JWKS: %v", err)
	}
	if _, err := c.FetchJWKS(testContext(t), strings.Replace(hs.URL, "https", "http", 1)+"/.well-known/jwks.json"); err == nil {
		t.Error("http:// JWKS URL accepted")
	}
	untrusting := newClient(t, "", client.Options{RootCAs: nil, CAFile: "", TLS: &tls.Config{}, ServerName: ""})
	if _, err := untrusting.FetchJWKS(testContext(t), hs.URL+"/.well-known/jwks.json"); err == nil {
		t.Error("JWKS fetched from a server whose CA is not trusted")
	}
}

// TestFetchJWKSFollowsRedirectsOnlyToHTTPS: a redirect from the https
// JWKS URL to plain http is refused before the http server is asked, so
// keys that anyone on the path could have written are never accepted; a
// redirect to another https URL is followed.
func TestFetchJWKSFollowsRedirectsOnlyToHTTPS(t *testing.T) {
	pki := testkit.PKI(t)
	ks, err := attribution.LoadKeySet(pki.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := ks.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(jwks)
	}))
	defer plain.Close()
	var target string
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-http":
			http.Redirect(w, r, plain.URL+"/.well-known/jwks.json", http.StatusFound)
		case "/to-https":
			http.Redirect(w, r, target+"/.well-known/jwks.json", http.StatusMovedPermanently)
		case "/.well-known/jwks.json":
			w.Header().Set("Content-Type", "application/jwk-set+json")
			w.Write(jwks)
		default:
			http.NotFound(w, r)
		}
	}))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	defer hs.Close()
	target = hs.URL

	c := newClient(t, pki.CA(), client.Options{})
	if keys, err := c.FetchJWKS(testContext(t), hs.URL+"/to-http"); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("redirect to http: keys %v, err %v; want a refusal", keys, err)
	}
	if n := plainHits.Load(); n != 0 {
		t.Errorf("the plain http server was asked %d times", n)
	}
	keys, err := c.FetchJWKS(testContext(t), hs.URL+"/to-https")
	if err != nil {
		t.Fatalf("redirect to https: %v", err)
	}
	if _, ok := keys[ks.ActiveKID()]; !ok {
		t.Fatalf("keys %v after an https redirect, want the active kid %s", keys, ks.ActiveKID())
	}
}
