package client_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/devpki"
)

// The examples talk to a real AGTP server on loopback, started once.
var (
	exampleOnce sync.Once
	exampleAddr string
	exampleCA   string
	exampleStop func()
)

// exampleServer starts a front-door transport that answers DISCOVER /
// with a small manifest, streams three parts for STREAM-like SUMMARIZE
// requests, and echoes anything else. It returns the address and the CA
// file to trust.
func exampleServer() (addr, caFile string) {
	exampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agtp-client-example-")
		if err != nil {
			panic(err)
		}
		pki, err := devpki.Ensure(dir)
		if err != nil {
			panic(err)
		}
		srv, err := transport.New(transport.Options{
			Addr: "127.0.0.1:0", CertFile: pki.Cert(devpki.AGTPServer), KeyFile: pki.Key(devpki.AGTPServer),
			Logger: slog.New(slog.DiscardHandler),
		}, transport.HandlerFunc(func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
			if req.Method == agtp.MethodDiscover && req.Path == "/" {
				return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeManifestJSON, []byte(`{"server_id":"example"}`))
			}
			return agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(req.Method+" "+req.Path))
		}))
		if err != nil {
			panic(err)
		}
		if err := srv.Listen(); err != nil {
			panic(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.Serve(ctx); close(done) }()
		exampleAddr, exampleCA = srv.TCPAddr().String(), pki.CA()
		exampleStop = func() {
			cancel()
			<-done
			os.RemoveAll(dir)
		}
	})
	return exampleAddr, exampleCA
}

func exampleCleanup() {
	if exampleStop != nil {
		exampleStop()
	}
}

// Send addresses a server with an agtp:// URI. The port defaults to 4480;
// this example's server listens elsewhere.
func Example() {
	addr, caFile := exampleServer()
	c, err := client.New(client.Options{
		CAFile:  caFile, // for the local suite: the CA `make run` prints
		AgentID: strings.Repeat("7f3a9c2d", 8),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Send(ctx, agtp.MethodDiscover, "agtp://"+addr+"/", nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, resp.Header.Get(agtp.HeaderContentType))
	fmt.Println(string(resp.Body))
	// Output:
	// 200 application/vnd.agtp.manifest+json
	// {"server_id":"example"}
}

// Do sends a request built with package agtp to a host:port.
func ExampleClient_Do() {
	addr, caFile := exampleServer()
	c, err := client.New(client.Options{CAFile: caFile})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	req, _ := agtp.NewRequest(agtp.MethodQuery, "/documents?lang=en")
	req.Header.Set(agtp.HeaderTaskID, "task-0042")
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = []byte(`{"parameters":{"intent":"find the Q3 report"}}`)
	resp, err := c.Do(context.Background(), req, addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	if !agtp.IsSuccess(resp.Status) {
		var eb agtp.ErrorBody
		json.Unmarshal(resp.Body, &eb)
		fmt.Println("refused:", resp.Status, eb.Reason)
		return
	}
	fmt.Println(resp.Status, string(resp.Body))
	// Output:
	// 200 QUERY /documents
}

// Stream reads a series of responses one at a time. This one is a series
// of one, as a method that does not stream gives.
func ExampleClient_Stream() {
	addr, caFile := exampleServer()
	c, err := client.New(client.Options{CAFile: caFile})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	req, _ := agtp.NewRequest(agtp.MethodSummarize, "/reports")
	s, err := c.Stream(context.Background(), req, addr)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for {
		resp, err := s.Next()
		if errors.Is(err, io.EOF) {
			break // the series is complete
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(resp.Status, string(resp.Body), resp.More())
	}
	// Output:
	// 200 SUMMARIZE /reports false
}

// NewURIRequest shows how each agtp:// form becomes an address and a
// request-target. In Form 1a the agent-id names the agent addressed; it is
// not sent as the caller's Agent-ID.
func ExampleNewURIRequest() {
	id := strings.Repeat("ab", 32)
	for _, uri := range []string{
		"agtp://agtp.acme.tld/agents/booker/orders?status=open",
		"agtp://" + id + "@127.0.0.1:4481/",
		"agtp://10.0.0.7",
		"agtp://" + id,
	} {
		req, u, err := client.NewURIRequest(agtp.MethodQuery, uri, nil, nil)
		if err != nil {
			fmt.Println(errors.Is(err, client.ErrNoAddress), "form", u.Form)
			continue
		}
		fmt.Println(u.Address(), req.Path+"?"+req.RawQuery, req.Header.Has(agtp.HeaderAgentID))
	}
	// Output:
	// agtp.acme.tld:4480 /agents/booker/orders?status=open false
	// 127.0.0.1:4481 /? false
	// 10.0.0.7:4480 /? false
	// true form 1
}

// VerifyAttribution checks a response's Attribution-Record against the
// server's published keys. Here the "server" is a local signer.
func ExampleVerifyAttribution() {
	pub, priv, _ := ed25519.GenerateKey(nil)
	signer := attribution.NewSigner(priv)
	kid, _ := attribution.KeyID(pub)
	keys := attribution.PublicKeys{kid: pub} // what FetchJWKS returns

	body := []byte(`{"status":200}`)
	resp := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, body)
	resp.Header.Set(agtp.HeaderResponseID, "r-1")
	sum := sha256.Sum256(body)
	jws, auditID, _ := signer.SignPayload(&attribution.Payload{
		Status: 200, Method: "QUERY", ResponseID: "r-1", ResultHash: hex.EncodeToString(sum[:]),
		PreviousAuditID: attribution.ZeroAuditID, AuditRecordVersion: "1",
	})
	resp.Header.Set(agtp.HeaderAttributionRecord, jws)
	resp.Header.Set(agtp.HeaderAuditID, auditID)

	rec, err := client.VerifyAttribution(resp, keys)
	fmt.Println(err, rec.Payload.Method, rec.KID == kid)

	resp.Status = agtp.StatusAccepted // the record no longer describes the response
	_, err = client.VerifyAttribution(resp, keys)
	fmt.Println(errors.Is(err, client.ErrRecordMismatch))
	// Output:
	// <nil> QUERY true
	// true
}
