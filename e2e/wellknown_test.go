package e2e

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// TestWellKnownBootstrap fetches the bootstrap document of core §6.1.14
// as a resolver meeting the organisation's domain would, then follows
// its namespace document link.
func TestWellKnownBootstrap(t *testing.T) {
	c := Start(t, Options{InProcess: true, Env: []string{"AGTP_DOMAIN=example.test", "AGTP_PUBLIC_HOST=agtp.example.test"}})
	c.registerAgent(t, "bootstrap-listed", "documents:read")
	https := c.Procs["frontdoor"].HTTPSAddr
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool()}}}
	get := func(t *testing.T, url string) (*http.Response, []byte) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
		}
		return resp, b
	}

	resp, body := get(t, "https://"+https+"/.well-known/agtp")
	var doc struct {
		AGTPVersion   string `json:"agtp_version"`
		Endpoint      string `json:"endpoint"`
		NamespaceRoot string `json:"namespace_root"`
		Verification  struct {
			DNSAnchor string `json:"dns_anchor"`
		} `json:"verification"`
		Discovery struct {
			NamespaceDocument string `json:"namespace_document"`
			UpdatedAt         string `json:"well_known_updated_at"`
		} `json:"discovery"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if doc.AGTPVersion != agtp.DocumentVersion || doc.AGTPVersion == strings.TrimPrefix(agtp.Version, "AGTP/") {
		t.Errorf("agtp_version %q: want the specification's version %s, not the wire version", doc.AGTPVersion, agtp.DocumentVersion)
	}
	if doc.Endpoint != "agtp://agtp.example.test/agents" {
		t.Errorf("endpoint %q, want the configured public host", doc.Endpoint)
	}
	root, err := agtp.ParseURI(doc.NamespaceRoot + "/bootstrap-listed")
	if err != nil || root.Form != agtp.FormDomainAgent || root.Port != 0 || root.Host != "example.test" {
		t.Errorf("namespace_root %q does not make Form 3 URIs without a port: %+v, %v", doc.NamespaceRoot, root, err)
	}
	if doc.Verification.DNSAnchor != "_agtp.example.test" {
		t.Errorf("dns_anchor %q", doc.Verification.DNSAnchor)
	}
	if _, err := time.Parse(time.RFC3339, doc.Discovery.UpdatedAt); err != nil {
		t.Errorf("well_known_updated_at %q: %v", doc.Discovery.UpdatedAt, err)
	}
	if resp.Header.Get("Cache-Control") == "" {
		t.Error("no Cache-Control: resolvers would fall back to their own default")
	}

	if !strings.HasPrefix(doc.Discovery.NamespaceDocument, "https://"+https+"/") {
		t.Fatalf("namespace_document %q is not on the listener that was asked", doc.Discovery.NamespaceDocument)
	}
	_, ns := get(t, doc.Discovery.NamespaceDocument)
	if !strings.Contains(string(ns), "bootstrap-listed") {
		t.Errorf("the namespace document does not list the registered agent: %s", ns)
	}
}
