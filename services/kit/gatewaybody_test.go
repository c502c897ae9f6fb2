package kit_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// countingJSON is a JSON object of n bytes, {"path":"aaa…"}, that counts
// what the server has read of it.
type countingJSON struct {
	n, off int64
	read   *atomic.Int64
}

func (c *countingJSON) Read(p []byte) (int, error) {
	const head, tail = `{"path":"`, `"}`
	i := 0
	for ; i < len(p) && c.off < c.n; i, c.off = i+1, c.off+1 {
		switch {
		case c.off < int64(len(head)):
			p[i] = head[c.off]
		case c.off >= c.n-int64(len(tail)):
			p[i] = tail[c.off-(c.n-int64(len(tail)))]
		default:
			p[i] = 'a'
		}
	}
	c.read.Add(int64(i))
	if i == 0 {
		return 0, io.EOF
	}
	return i, nil
}

// The REST gateway decodes a body before the call reaches the access
// check, so what it reads is capped whoever sends it: a body announced
// larger than a service takes is refused 413 unread, one sent without a
// length is cut off at the cap, and a body within it still works.
func TestGatewayCapsRequestBodies(t *testing.T) {
	b := newBase(t, "catalogsvc")
	var served atomic.Int32
	catalogv1.RegisterCatalogServiceServer(b.Server.GRPC(), &testkit.CatalogStub{
		ResolveRouteF: func(context.Context, *catalogv1.ResolveRouteRequest) (*catalogv1.ResolveRouteResponse, error) {
			served.Add(1)
			return &catalogv1.ResolveRouteResponse{}, nil
		},
	})
	b.Server.Register("agtp.catalog.v1.CatalogService", func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
		return catalogv1.RegisterCatalogServiceHandler(ctx, mux, conn)
	}, access.Table{catalogv1.CatalogService_ResolveRoute_FullMethodName: {Operators: true}})
	runBase(t, b)

	pki := testkit.PKI(t)
	client := func(name string) *http.Client {
		pair, err := tls.LoadX509KeyPair(pki.Cert(name), pki.Key(name))
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS13, RootCAs: b.MTLS.Pool(), ServerName: "catalogsvc", Certificates: []tls.Certificate{pair},
		}}}
		t.Cleanup(hc.CloseIdleConnections)
		return hc
	}
	// maxRead is what the client has sent, which includes what sits in
	// socket and flow-control buffers when the server stops reading.
	const capBytes = 8 << 20
	for _, tc := range []struct {
		name       string
		caller     string
		size       int64
		announce   bool // send Content-Length
		status     int
		reason     string
		maxRead    int64 // of the body, by the server
		wantServed bool
	}{
		{"announced too large, refused caller", "policysvc", 64 << 20, true, http.StatusRequestEntityTooLarge, kit.ReasonBodyTooLarge, capBytes / 2, false},
		{"announced too large, admitted caller", devpki.Admin, 64 << 20, true, http.StatusRequestEntityTooLarge, kit.ReasonBodyTooLarge, capBytes / 2, false},
		{"unannounced, too large", "policysvc", 64 << 20, false, http.StatusBadRequest, "", 2 * capBytes, false},
		{"within the cap, refused caller", "policysvc", 1 << 20, true, http.StatusForbidden, access.ReasonNotPermitted, 1 << 20, false},
		{"within the cap, admitted caller", devpki.Admin, 1 << 20, true, http.StatusOK, "", 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := served.Load()
			var read atomic.Int64
			req, err := http.NewRequest("POST", "https://"+b.Server.HTTPAddr()+"/v1/catalog/routes:resolve", &countingJSON{n: tc.size, read: &read})
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = -1
			if tc.announce {
				req.ContentLength = tc.size
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client(tc.caller).Do(req)
			if err != nil {
				// The server may close once it stops reading; what it
				// read is what matters then.
				if read.Load() > tc.maxRead {
					t.Fatalf("%v after the server read %d bytes", err, read.Load())
				}
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.reason != "" {
				var st struct {
					Details []struct {
						Reason string `json:"reason"`
					} `json:"details"`
				}
				if err := json.Unmarshal(body, &st); err != nil || len(st.Details) == 0 || st.Details[0].Reason != tc.reason {
					t.Fatalf("body %s, want reason %s", body, tc.reason)
				}
			}
			if got := read.Load(); got > tc.maxRead {
				t.Fatalf("the server read %d bytes of the body, want at most %d", got, tc.maxRead)
			}
			if got := served.Load() > before; got != tc.wantServed {
				t.Fatalf("handler ran: %v, want %v", got, tc.wantServed)
			}
			if !strings.Contains(resp.Header.Get("Content-Type"), "json") {
				t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
			}
		})
	}
}
