package agtp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func writeResp(t *testing.T, r *Response) (string, error) {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	err := r.Write(w)
	if ferr := w.Flush(); ferr != nil {
		t.Fatal(ferr)
	}
	return buf.String(), err
}

func writeReq(t *testing.T, r *Request) (string, error) {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	err := r.Write(w)
	if ferr := w.Flush(); ferr != nil {
		t.Fatal(ferr)
	}
	return buf.String(), err
}

func TestResponseWriteWireForm(t *testing.T) {
	tests := []struct {
		name string
		resp *Response
		want string
	}{
		{"Content-Length 0 when no body",
			&Response{Status: 200, Header: Header{{HeaderServerID, "srv"}}},
			"AGTP/1.0 200 OK\r\nServer-ID: srv\r\nContent-Length: 0\r\n\r\n"},
		{"204 drops Content-Type and sends Content-Length 0",
			&Response{Status: 204, Header: Header{{HeaderContentType, MediaTypeJSON}}},
			"AGTP/1.0 204 No Content\r\nContent-Length: 0\r\n\r\n"},
		{"Content-Type dropped on any empty body",
			&Response{Status: 200, Header: Header{{HeaderContentType, MediaTypeJSON}}},
			"AGTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"retired fields never emitted",
			&Response{Status: 200, Header: Header{
				{"AGTP-Version", "1.0"}, {"agtp-method", "QUERY"}, {"AGTP-Status", "200"},
				{"Principal-ID", "p"}, {"Server-Agent-ID", "s"}, {HeaderServerID, "srv"}}},
			"AGTP/1.0 200 OK\r\nServer-ID: srv\r\nContent-Length: 0\r\n\r\n"},
		{"stale Content-Length and Transfer-Encoding replaced",
			&Response{Status: 200, Header: Header{{"content-length", "99"}, {HeaderTransferEncoding, "chunked"}, {HeaderContentType, "text/plain"}}, Body: []byte("hi")},
			"AGTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"},
		{"custom status text kept", &Response{Status: 503, StatusText: "Service Unavailable"},
			"AGTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"},
		{"unknown code has empty text", &Response{Status: 299},
			"AGTP/1.0 299 \r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := writeResp(t, tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("wrote\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestWriteRefusesNonConformantMessages(t *testing.T) {
	tests := []struct {
		name string
		resp *Response
		want error
	}{
		{"204 with body", &Response{Status: 204, Header: Header{{HeaderContentType, "text/plain"}}, Body: []byte("x")}, ErrBodyNotAllowed},
		{"body without Content-Type", &Response{Status: 200, Body: []byte("x")}, ErrMissingContentType},
		{"CRLF injection in value", &Response{Status: 200, Header: Header{{HeaderTaskID, "a\r\nX-Evil: 1"}}}, ErrInvalidHeader},
		{"LF in value", &Response{Status: 200, Header: Header{{HeaderTaskID, "a\nb"}}}, ErrInvalidHeader},
		{"space in name", &Response{Status: 200, Header: Header{{"Bad Name", "v"}}}, ErrInvalidHeader},
		{"colon in name", &Response{Status: 200, Header: Header{{"A:B", "v"}}}, ErrInvalidHeader},
		{"empty name", &Response{Status: 200, Header: Header{{"", "v"}}}, ErrInvalidHeader},
		{"status below 100", &Response{Status: 99}, ErrInvalidStatus},
		{"status above 999", &Response{Status: 1000}, ErrInvalidStatus},
		{"CRLF in status text", &Response{Status: 200, StatusText: "OK\r\nX: y"}, ErrInvalidStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := writeResp(t, tt.resp)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got != "" {
				t.Errorf("a refused message must write nothing, wrote %q", got)
			}
			if err := tt.resp.Check(); !errors.Is(err, tt.want) {
				t.Errorf("Check = %v, want %v", err, tt.want)
			}
		})
	}
	if err := (&Response{Status: 200, Header: Header{{HeaderContentType, MediaTypeJSON}}, Body: []byte("{}")}).Check(); err != nil {
		t.Errorf("Check of a conformant response = %v", err)
	}
}

func TestRequestWrite(t *testing.T) {
	req, err := NewRequest("QUERY", "/documents?lang=en")
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderAgentID, "abc")
	req.Header.Set("content-type", MediaTypeJSON)
	req.Body = []byte(`{"parameters":{}}`)
	got, err := writeReq(t, req)
	if err != nil {
		t.Fatal(err)
	}
	want := "AGTP/1.0 QUERY /documents?lang=en\r\nAgent-ID: abc\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 17\r\n\r\n{\"parameters\":{}}"
	if got != want {
		t.Errorf("wrote\n%q\nwant\n%q", got, want)
	}

	// Path "" means "/"; an invalid method token other than the
	// lexical rule is still writable so clients can probe 459.
	got, err = writeReq(t, &Request{Method: "X-NOPE"})
	if err != nil || got != "AGTP/1.0 X-NOPE /\r\nContent-Length: 0\r\n\r\n" {
		t.Errorf("got %q, %v", got, err)
	}

	bad := []struct {
		name string
		req  *Request
		want error
	}{
		{"method with space", &Request{Method: "QU ERY", Path: "/"}, ErrInvalidMethod},
		{"empty method", &Request{Path: "/"}, ErrInvalidMethod},
		{"query inside Path", &Request{Method: "QUERY", Path: "/a?b"}, ErrInvalidTarget},
		{"relative path", &Request{Method: "QUERY", Path: "a"}, ErrInvalidTarget},
		{"fragment in path", &Request{Method: "QUERY", Path: "/a#b"}, ErrInvalidTarget},
		{"fragment in query", &Request{Method: "QUERY", Path: "/a", RawQuery: "x#"}, ErrInvalidTarget},
		{"space in query", &Request{Method: "QUERY", Path: "/a", RawQuery: "x y"}, ErrInvalidTarget},
		{"body without Content-Type", &Request{Method: "QUERY", Path: "/a", Body: []byte("x")}, ErrMissingContentType},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			got, err := writeReq(t, tt.req)
			if !errors.Is(err, tt.want) || got != "" {
				t.Fatalf("got %q, %v; want nothing written and %v", got, err, tt.want)
			}
		})
	}
	if _, err := NewRequest("QUERY", "/a#b"); err == nil {
		t.Error("NewRequest accepted a fragment")
	}
}

// withoutLength drops the Content-Length Write adds, for comparisons.
func withoutLength(h Header) Header {
	c := h.Clone()
	c.Del(HeaderContentLength)
	return c
}

func TestRoundTrip(t *testing.T) {
	reqs := []*Request{
		{Method: "QUERY", Path: "/"},
		{Method: "DISCOVER", Path: "/agents", RawQuery: "format=json&x=%20y"},
		{Method: "EXECUTE", Path: "/orders/42", Header: Header{
			{HeaderAgentID, strings.Repeat("ab", 32)}, {HeaderAuthorityScope, "orders:execute, orders:read"},
			{HeaderTaskID, "task-0042"}, {HeaderContentType, MediaTypeJSON}, {"X-Custom", "a  b\tc"},
		}, Body: []byte(`{"method":"EXECUTE","parameters":{"action":"ship"}}`)},
	}
	for _, want := range reqs {
		wire, err := writeReq(t, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readReq(t, wire, Limits{})
		if err != nil {
			t.Fatalf("%q: %v", wire, err)
		}
		if got.Method != want.Method || got.Path != want.Path || got.RawQuery != want.RawQuery ||
			!bytes.Equal(got.Body, want.Body) || !equalHeader(withoutLength(got.Header), want.Header) {
			t.Errorf("round trip of %q changed the request:\n got %+v\nwant %+v", wire, got, want)
		}
	}

	resps := []*Response{
		{Status: 200, StatusText: "OK", Header: Header{{HeaderServerID, "srv"}, {HeaderResponseID, "r1"}}},
		{Status: 459, StatusText: "Method Violation", Header: Header{{HeaderContentType, MediaTypeJSON}}, Body: []byte(`{"status":459}`)},
		{Status: 204, StatusText: "No Content"},
	}
	for _, want := range resps {
		wire, err := writeResp(t, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadResponse(bufio.NewReader(strings.NewReader(wire)), Limits{})
		if err != nil {
			t.Fatalf("%q: %v", wire, err)
		}
		if got.Status != want.Status || got.StatusText != want.StatusText ||
			!bytes.Equal(got.Body, want.Body) || !equalHeader(withoutLength(got.Header), want.Header) {
			t.Errorf("round trip of %q changed the response:\n got %+v\nwant %+v", wire, got, want)
		}
	}
}

// readResp is readReq for responses: both read paths must agree.
func readResp(t *testing.T, s string, lim Limits) (*Response, error) {
	t.Helper()
	fast, errFast := ReadResponse(bufio.NewReader(strings.NewReader(s)), lim)
	slow, errSlow := ReadResponse(bufio.NewReader(iotest.OneByteReader(strings.NewReader(s))), lim)
	var pf, ps *ProtocolError
	if errors.As(errFast, &pf) != errors.As(errSlow, &ps) || pf != nil && *pf != *ps || pf == nil && errFast != errSlow ||
		(fast == nil) != (slow == nil) ||
		fast != nil && (fast.Status != slow.Status || fast.StatusText != slow.StatusText ||
			!bytes.Equal(fast.Body, slow.Body) || !equalHeader(fast.Header, slow.Header)) {
		t.Fatalf("buffered and byte-at-a-time reads differ: %+v %v / %+v %v", fast, errFast, slow, errSlow)
	}
	return fast, errFast
}

func TestReadResponse(t *testing.T) {
	valid := []struct {
		name, in string
		status   int
		text     string
	}{
		{"with text", "AGTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "OK"},
		{"text with spaces and tab", "AGTP/1.0 503 Service\tUn available\r\n\r\n", 503, "Service\tUn available"},
		{"empty text", "AGTP/1.0 204 \r\n\r\n", 204, ""},
		{"no text", "AGTP/1.0 204\r\n\r\n", 204, ""},
		{"bare LF", "AGTP/1.0 262 Authorization Required\n\n", 262, "Authorization Required"},
		{"retired field tolerated", "AGTP/1.0 200 OK\r\nAGTP-Status: 200\r\n\r\n", 200, "OK"},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := readResp(t, tt.in, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tt.status || resp.StatusText != tt.text {
				t.Errorf("got %d %q", resp.Status, resp.StatusText)
			}
		})
	}
	malformed := []struct{ name, in, reason string }{
		{"HTTP status line", "HTTP/1.1 200 OK\r\n\r\n", ReasonInvalidStatusLine},
		{"two digits", "AGTP/1.0 20 OK\r\n\r\n", ReasonInvalidStatusLine},
		{"four digits", "AGTP/1.0 2000 OK\r\n\r\n", ReasonInvalidStatusLine},
		{"below 100", "AGTP/1.0 099 x\r\n\r\n", ReasonInvalidStatusLine},
		{"no space after code", "AGTP/1.0 200OK\r\n\r\n", ReasonInvalidStatusLine},
		{"letters for code", "AGTP/1.0 abc OK\r\n\r\n", ReasonInvalidStatusLine},
		{"control in text", "AGTP/1.0 200 O\x01K\r\n\r\n", ReasonInvalidStatusLine},
		{"transfer-encoding", "AGTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ReasonTransferEncodingUnsupported},
		{"type without length", "AGTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nabc", ReasonContentLengthRequired},
		{"bad length", "AGTP/1.0 200 OK\r\nContent-Length: x\r\n\r\n", ReasonInvalidContentLength},
		{"obs-fold", "AGTP/1.0 200 OK\r\nServer-ID: a\r\n b\r\n\r\n", ReasonInvalidHeader},
		{"status line too long", "AGTP/1.0 200 " + strings.Repeat("x", 9000) + "\r\n\r\n", ReasonInvalidStatusLine},
	}
	for _, tt := range malformed {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readResp(t, tt.in, Limits{})
			wantProtocolError(t, err, 400, tt.reason, true)
		})
	}
	if _, err := ReadResponse(bufio.NewReader(strings.NewReader("")), Limits{}); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
	if _, err := ReadResponse(bufio.NewReader(strings.NewReader("AGTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nab")), Limits{}); err != io.ErrUnexpectedEOF {
		t.Errorf("short body: %v, want io.ErrUnexpectedEOF", err)
	}
	_, err := ReadResponse(bufio.NewReader(strings.NewReader("AGTP/1.0 200 OK\r\nContent-Type: t/p\r\nContent-Length: 11\r\n\r\n")), Limits{MaxBody: 10})
	wantProtocolError(t, err, 400, ReasonBodyTooLarge, true)
}

func TestStreamReadsSeriesThenStops(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	for i, part := range []string{"one", "two", "three"} {
		r := NewResponse(200, "text/plain", []byte(part))
		if i < 2 {
			r.Header.Set(HeaderStream, StreamContinue)
		}
		if err := r.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	// The response to the next request follows the series.
	if err := NewResponse(204, "", nil).Write(w); err != nil {
		t.Fatal(err)
	}
	w.Flush()

	br := bufio.NewReader(&buf)
	s := NewStream(br, Limits{})
	var got []string
	for {
		r, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(r.Body))
	}
	if strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("series = %v", got)
	}
	next, err := ReadResponse(br, Limits{})
	if err != nil || next.Status != 204 {
		t.Fatalf("next response: %v %v", next, err)
	}

	// A connection that ends mid-series is not a complete series.
	trunc := "AGTP/1.0 200 OK\r\nX-AGTP-Stream: continue\r\n\r\n"
	s = NewStream(bufio.NewReader(strings.NewReader(trunc)), Limits{})
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated series: %v, want io.ErrUnexpectedEOF", err)
	}
}
