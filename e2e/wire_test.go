package e2e

import (
	"bufio"
	"crypto/tls"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/agtp"
)

// roundTrip sends one request on a new TLS connection to the front door
// and reads its response.
func (c *Cluster) roundTrip(t *testing.T, req *agtp.Request) *agtp.Response {
	t.Helper()
	conn, err := tls.Dial("tcp", c.Procs["frontdoor"].AGTPAddr, agtp.ClientTLSConfig("localhost", c.Admin.Pool()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	resp, err := agtp.ReadResponse(bufio.NewReader(conn), agtp.Limits{MaxBody: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return resp
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
