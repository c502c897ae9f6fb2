package e2e

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
)

// TestQUICCarriesTheSamePipeline sends requests over QUIC (one stream per
// request) with the public client and checks they get the same answers,
// records and chain as over TCP.
func TestQUICCarriesTheSamePipeline(t *testing.T) {
	c := Start(t, Options{})
	agent := c.registerAgent(t, "e2e-quic", "orders:read")
	keys := c.signingKeys(t)
	addr := c.Procs["frontdoor"].AGTPAddr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, quic := range []bool{true, false} {
		name := map[bool]string{true: "quic", false: "tcp"}[quic]
		t.Run(name, func(t *testing.T) {
			cl, err := client.New(client.Options{RootCAs: c.Admin.Pool(), ServerName: "localhost", QUIC: quic, AgentID: agent, Certificates: []tls.Certificate{*AgentCertificate(agent)}})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var prev string
			for i, target := range []string{"/orders", "/orders/ord-1002", "/orders"} {
				req, _ := agtp.NewRequest("QUERY", target)
				resp, err := cl.Do(ctx, req, addr)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if resp.Status != agtp.StatusOK || !strings.Contains(string(resp.Body), `"result"`) {
					t.Fatalf("QUERY %s over %s = %d %s", target, name, resp.Status, resp.Body)
				}
				rec, err := client.VerifyAttribution(resp, keys)
				if err != nil {
					t.Fatalf("attribution: %v", err)
				}
				if prev != "" && rec.Payload.PreviousAuditID != prev {
					t.Fatalf("record %d does not chain: previous %s, want %s", i, rec.Payload.PreviousAuditID, prev)
				}
				prev = rec.AuditID
			}
		})
	}
}
