package agtp

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
)

const benchBody = `{"method":"QUERY","task_id":"task-0042","parameters":{"intent":"find the Q3 report"}}`

// benchRequest is a typical request: request line, nine realistic AGTP
// fields and a small JSON body (about 560 bytes).
var benchRequest = "AGTP/1.0 QUERY /documents/search?lang=en\r\n" +
	"Agent-ID: " + strings.Repeat("7f3a9c2d", 8) + "\r\n" +
	"Authority-Scope: documents:read, knowledge:query\r\n" +
	"Session-ID: sess-7d1f0c2a9b3e4f5a6b7c8d9e0f1a2b3c\r\n" +
	"Task-ID: task-0042\r\n" +
	"Request-ID: 01890a5d-ac96-774b-bcce-b302099a8057\r\n" +
	"Idempotency-Key: 5f0c2a9b-3e4f-4a6b-8c8d-9e0f1a2b3c4d\r\n" +
	"Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n" +
	"Content-Type: application/vnd.agtp+json\r\n" +
	"Content-Length: " + strconv.Itoa(len(benchBody)) + "\r\n\r\n" +
	benchBody

func BenchmarkReadRequest(b *testing.B) {
	rd := strings.NewReader(benchRequest)
	br := bufio.NewReader(rd)
	b.SetBytes(int64(len(benchRequest)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(benchRequest)
		br.Reset(rd)
		req, err := ReadRequest(br, Limits{})
		if err != nil || len(req.Body) != len(benchBody) {
			b.Fatal(err)
		}
	}
}

func benchResponse() *Response {
	r := NewResponse(StatusOK, MediaTypeJSON, []byte(`{"status":200,"task_id":"task-0042","result":{"results":[{"content":"Q3 report","confidence":0.92}]}}`))
	r.Header.Set(HeaderServerID, "agtp-edge-7.us-east.acme.com")
	r.Header.Set(HeaderAgentID, strings.Repeat("7f3a9c2d", 8))
	r.Header.Set(HeaderTaskID, "task-0042")
	r.Header.Set(HeaderRequestID, "01890a5d-ac96-774b-bcce-b302099a8057")
	r.Header.Set(HeaderResponseID, "01890a5d-ad01-7c3e-9d2f-5b6c7d8e9f00")
	r.Header.Set(HeaderAuditID, strings.Repeat("0123456789abcdef", 4))
	r.Header.Set(HeaderAttributionRecord, "eyJhbGciOiJFZERTQSIsImtpZCI6ImsxIn0."+strings.Repeat("eyJzZXJ2ZXJfaWQiOiJzIn0", 8)+"."+strings.Repeat("c2ln", 22))
	r.Header.Set(HeaderTrustTier, "1")
	return r
}

func BenchmarkWriteResponse(b *testing.B) {
	r := benchResponse()
	w := bufio.NewWriter(io.Discard)
	var n int
	{
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		r.Write(bw)
		bw.Flush()
		n = buf.Len()
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Write(w); err != nil {
			b.Fatal(err)
		}
		w.Flush()
	}
}

func BenchmarkParseURI(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseURI("agtp://agtp.acme.com/agents/bookbot?format=json"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScopeCovers(b *testing.B) {
	declared, _ := ParseScopes("documents:read, knowledge:*, booking:hotel, *:query")
	claimed, _ := ParseScopes("documents:read, knowledge:search, calendar:query")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := declared.CoversAll(claimed); !ok {
			b.Fatal("not covered")
		}
	}
}
