package agtp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// readReq reads one request from s twice: once with the whole input
// buffered (the fast path) and once delivered a byte at a time (the
// line-by-line path). Both must give the same outcome.
func readReq(t *testing.T, s string, lim Limits) (*Request, error) {
	t.Helper()
	fast, errFast := ReadRequest(bufio.NewReader(strings.NewReader(s)), lim)
	slow, errSlow := ReadRequest(bufio.NewReader(iotest.OneByteReader(strings.NewReader(s))), lim)
	if msg := sameOutcome(fast, errFast, slow, errSlow); msg != "" {
		t.Fatalf("buffered and byte-at-a-time reads differ: %s", msg)
	}
	return fast, errFast
}

// sameOutcome compares two ReadRequest results; "" means equal.
func sameOutcome(a *Request, errA error, b *Request, errB error) string {
	var pa, pb *ProtocolError
	switch {
	case errors.As(errA, &pa) != errors.As(errB, &pb):
		return fmt.Sprintf("errors %v and %v", errA, errB)
	case pa != nil && *pa != *pb:
		return fmt.Sprintf("errors %+v and %+v", *pa, *pb)
	case pa == nil && errA != errB:
		return fmt.Sprintf("errors %v and %v", errA, errB)
	case (a == nil) != (b == nil):
		return fmt.Sprintf("requests %v and %v", a, b)
	case a != nil && (a.Method != b.Method || a.Target != b.Target || a.Path != b.Path ||
		a.RawQuery != b.RawQuery || !bytes.Equal(a.Body, b.Body) || !equalHeader(a.Header, b.Header)):
		return fmt.Sprintf("requests %+v and %+v", a, b)
	}
	return ""
}

// wantProtocolError fails unless err is a *ProtocolError with exactly
// this status, reason and CloseConnection.
func wantProtocolError(t *testing.T, err error, status int, reason string, closeConn bool) *ProtocolError {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want *ProtocolError %d %s", err, err, status, reason)
	}
	if pe.Status != status || pe.Reason != reason || pe.CloseConnection != closeConn {
		t.Fatalf("got %d %s close=%v (%s), want %d %s close=%v",
			pe.Status, pe.Reason, pe.CloseConnection, pe.Explanation, status, reason, closeConn)
	}
	if pe.Explanation == "" {
		t.Errorf("%s: empty explanation", reason)
	}
	return pe
}

func TestReadRequestMalformed(t *testing.T) {
	const ok = "\r\n\r\n"
	tests := []struct {
		name   string
		in     string
		status int
		reason string
		close  bool
	}{
		// '#' anywhere on the request line (core §5.5.1, assertions 15-16).
		{"fragment in path", "AGTP/1.0 QUERY /a#b" + ok, 400, ReasonInvalidRequestLine, true},
		{"fragment in query", "AGTP/1.0 QUERY /a?x=#" + ok, 400, ReasonInvalidRequestLine, true},
		{"fragment alone", "AGTP/1.0 QUERY #" + ok, 400, ReasonInvalidRequestLine, true},
		{"fragment in method", "AGTP/1.0 QU#RY /a" + ok, 400, ReasonInvalidRequestLine, true},
		// Three single-SP-separated tokens, version first.
		{"HTTP order", "QUERY /a AGTP/1.0" + ok, 400, ReasonInvalidRequestLine, true},
		{"HTTP request", "GET / HTTP/1.1" + ok, 400, ReasonInvalidRequestLine, true},
		{"version AGTP/2.0", "AGTP/2.0 QUERY /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"version AGTP/1.1", "AGTP/1.1 QUERY /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"version lower case", "agtp/1.0 QUERY /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"version only", "AGTP/1.0" + ok, 400, ReasonInvalidRequestLine, true},
		{"version and space", "AGTP/1.0 " + ok, 400, ReasonInvalidRequestLine, true},
		{"two spaces before method", "AGTP/1.0  QUERY /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"two spaces before target", "AGTP/1.0 QUERY  /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"trailing space", "AGTP/1.0 QUERY /a " + ok, 400, ReasonInvalidRequestLine, true},
		{"four tokens", "AGTP/1.0 QUERY /a b" + ok, 400, ReasonInvalidRequestLine, true},
		{"tab separator", "AGTP/1.0\tQUERY /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"empty request line", "\r\n" + "AGTP/1.0 QUERY /a" + ok, 400, ReasonInvalidRequestLine, true},
		{"NUL on line", "AGTP/1.0 QUERY /a\x00" + ok, 400, ReasonInvalidRequestLine, true},
		{"bare CR inside line", "AGTP/1.0 QUERY /a\rb" + ok, 400, ReasonInvalidRequestLine, true},
		{"non-ASCII target", "AGTP/1.0 QUERY /caf\xc3\xa9" + ok, 400, ReasonInvalidRequestLine, true},
		// request-target = path-absolute [ "?" query ].
		{"target relative", "AGTP/1.0 QUERY a/b" + ok, 400, ReasonInvalidRequestLine, true},
		{"target asterisk", "AGTP/1.0 QUERY *" + ok, 400, ReasonInvalidRequestLine, true},
		{"target absolute URI", "AGTP/1.0 QUERY agtp://h/a" + ok, 400, ReasonInvalidRequestLine, true},
		{"target query only", "AGTP/1.0 QUERY ?a=b" + ok, 400, ReasonInvalidRequestLine, true},
		{"target double slash", "AGTP/1.0 QUERY //a" + ok, 400, ReasonInvalidRequestLine, true},
		{"bad percent", "AGTP/1.0 QUERY /a%zz" + ok, 400, ReasonInvalidRequestLine, true},
		{"truncated percent", "AGTP/1.0 QUERY /a%4" + ok, 400, ReasonInvalidRequestLine, true},
		{"angle bracket", "AGTP/1.0 QUERY /a<b" + ok, 400, ReasonInvalidRequestLine, true},
		{"backslash", "AGTP/1.0 QUERY /a\\b" + ok, 400, ReasonInvalidRequestLine, true},
		{"quote in query", "AGTP/1.0 QUERY /a?x=\"" + ok, 400, ReasonInvalidRequestLine, true},
		// Framing (core §5.4.1).
		{"transfer-encoding chunked", "AGTP/1.0 QUERY /a\r\nTransfer-Encoding: chunked" + ok, 400, ReasonTransferEncodingUnsupported, true},
		{"transfer-encoding with length", "AGTP/1.0 QUERY /a\r\nContent-Length: 0\r\ntransfer-encoding: identity" + ok, 400, ReasonTransferEncodingUnsupported, true},
		{"content-type without length", "AGTP/1.0 QUERY /a\r\nContent-Type: application/vnd.agtp+json\r\n\r\n{}", 400, ReasonContentLengthRequired, true},
		{"length not a number", "AGTP/1.0 QUERY /a\r\nContent-Length: abc" + ok, 400, ReasonInvalidContentLength, true},
		{"length negative", "AGTP/1.0 QUERY /a\r\nContent-Length: -1" + ok, 400, ReasonInvalidContentLength, true},
		{"length plus sign", "AGTP/1.0 QUERY /a\r\nContent-Length: +5" + ok, 400, ReasonInvalidContentLength, true},
		{"length decimal", "AGTP/1.0 QUERY /a\r\nContent-Length: 1.0" + ok, 400, ReasonInvalidContentLength, true},
		{"length hex", "AGTP/1.0 QUERY /a\r\nContent-Length: 0x10" + ok, 400, ReasonInvalidContentLength, true},
		{"length empty", "AGTP/1.0 QUERY /a\r\nContent-Length:" + ok, 400, ReasonInvalidContentLength, true},
		{"length list", "AGTP/1.0 QUERY /a\r\nContent-Length: 5, 5" + ok, 400, ReasonInvalidContentLength, true},
		{"length with inner space", "AGTP/1.0 QUERY /a\r\nContent-Length: 5 5" + ok, 400, ReasonInvalidContentLength, true},
		{"length 19 digits", "AGTP/1.0 QUERY /a\r\nContent-Length: 1000000000000000000" + ok, 400, ReasonInvalidContentLength, true},
		{"length conflicting", "AGTP/1.0 QUERY /a\r\nContent-Length: 1\r\nContent-Length: 2" + ok + "ab", 400, ReasonInvalidContentLength, true},
		// Header field syntax.
		{"obs-fold space", "AGTP/1.0 QUERY /a\r\nTask-ID: a\r\n b" + ok, 400, ReasonInvalidHeader, true},
		{"obs-fold tab", "AGTP/1.0 QUERY /a\r\nTask-ID: a\r\n\tb" + ok, 400, ReasonInvalidHeader, true},
		{"leading whitespace first field", "AGTP/1.0 QUERY /a\r\n Task-ID: a" + ok, 400, ReasonInvalidHeader, true},
		{"no colon", "AGTP/1.0 QUERY /a\r\nTask-ID a" + ok, 400, ReasonInvalidHeader, true},
		{"space before colon", "AGTP/1.0 QUERY /a\r\nTask-ID : a" + ok, 400, ReasonInvalidHeader, true},
		{"empty name", "AGTP/1.0 QUERY /a\r\n: a" + ok, 400, ReasonInvalidHeader, true},
		{"space in name", "AGTP/1.0 QUERY /a\r\nTask ID: a" + ok, 400, ReasonInvalidHeader, true},
		{"parenthesis in name", "AGTP/1.0 QUERY /a\r\nTask(ID): a" + ok, 400, ReasonInvalidHeader, true},
		{"non-ASCII name", "AGTP/1.0 QUERY /a\r\nT\xc3\xa4sk: a" + ok, 400, ReasonInvalidHeader, true},
		{"control in value", "AGTP/1.0 QUERY /a\r\nTask-ID: a\x01b" + ok, 400, ReasonInvalidHeader, true},
		{"NUL in value", "AGTP/1.0 QUERY /a\r\nTask-ID: a\x00b" + ok, 400, ReasonInvalidHeader, true},
		{"bare CR in value", "AGTP/1.0 QUERY /a\r\nTask-ID: a\rb" + ok, 400, ReasonInvalidHeader, true},
		{"DEL in value", "AGTP/1.0 QUERY /a\r\nTask-ID: a\x7fb" + ok, 400, ReasonInvalidHeader, true},
		{"CR CR LF line end", "AGTP/1.0 QUERY /a\r\nTask-ID: a\r\r\n\r\n", 400, ReasonInvalidHeader, true},
		// Retired fields (core §5.5.6): refused, but the message is consumed.
		{"retired AGTP-Version", "AGTP/1.0 QUERY /a\r\nAGTP-Version: 1.0" + ok, 400, ReasonRetiredHeader, false},
		{"retired AGTP-Method", "AGTP/1.0 QUERY /a\r\nAGTP-Method: QUERY" + ok, 400, ReasonRetiredHeader, false},
		{"retired AGTP-Status", "AGTP/1.0 QUERY /a\r\nAGTP-Status: 200" + ok, 400, ReasonRetiredHeader, false},
		{"retired Principal-ID", "AGTP/1.0 QUERY /a\r\nPrincipal-ID: p" + ok, 400, ReasonRetiredHeader, false},
		{"retired Server-Agent-ID", "AGTP/1.0 QUERY /a\r\nServer-Agent-ID: s" + ok, 400, ReasonRetiredHeader, false},
		{"retired any case", "AGTP/1.0 QUERY /a\r\nagtp-version: 1.0" + ok, 400, ReasonRetiredHeader, false},
		{"retired before method check", "AGTP/1.0 query /a\r\nAGTP-Method: QUERY" + ok, 400, ReasonRetiredHeader, false},
		// Method token ^[A-Z]{3,32}$ (docs/decisions.md#D-method-token): 459,
		// not upper-cased.
		{"method lower case", "AGTP/1.0 query /a" + ok, 459, ReasonMethodInvalid, false},
		{"method mixed case", "AGTP/1.0 Query /a" + ok, 459, ReasonMethodInvalid, false},
		{"method X- prefix", "AGTP/1.0 X-NOPE /a" + ok, 459, ReasonMethodInvalid, false},
		{"method too short", "AGTP/1.0 QU /a" + ok, 459, ReasonMethodInvalid, false},
		{"method too long", "AGTP/1.0 " + strings.Repeat("A", 33) + " /a" + ok, 459, ReasonMethodInvalid, false},
		{"method digit", "AGTP/1.0 QUERY1 /a" + ok, 459, ReasonMethodInvalid, false},
		{"method punctuation", "AGTP/1.0 QU@RY /a" + ok, 459, ReasonMethodInvalid, false},
		{"method without target", "AGTP/1.0 discover" + ok, 459, ReasonMethodInvalid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := readReq(t, tt.in, Limits{})
			pe := wantProtocolError(t, err, tt.status, tt.reason, tt.close)
			if !pe.CloseConnection && req == nil {
				t.Fatal("a non-closing error must return the consumed request")
			}
		})
	}
}

func TestMethodNotUpperCased(t *testing.T) {
	req, err := readReq(t, "AGTP/1.0 query /a\r\nTask-ID: t-1\r\n\r\n", Limits{})
	wantProtocolError(t, err, StatusMethodViolation, ReasonMethodInvalid, false)
	if req.Method != "query" {
		t.Errorf("Method = %q, want it exactly as sent", req.Method)
	}
	if req.Header.Get(HeaderTaskID) != "t-1" {
		t.Error("the request of a 459 must keep its fields so Task-ID can be echoed")
	}
}

func TestReadRequestValid(t *testing.T) {
	tests := []struct {
		name, in                    string
		method, target, path, query string
		header                      Header
		body                        string
	}{
		{"minimal", "AGTP/1.0 QUERY /\r\n\r\n", "QUERY", "/", "/", "", nil, ""},
		{"target omitted means /", "AGTP/1.0 DISCOVER\r\n\r\n", "DISCOVER", "/", "/", "", nil, ""},
		{"path and query split at first ?", "AGTP/1.0 QUERY /documents/a%2Fb?x=1&y=/?z\r\n\r\n",
			"QUERY", "/documents/a%2Fb?x=1&y=/?z", "/documents/a%2Fb", "x=1&y=/?z", nil, ""},
		{"method word only in query", "AGTP/1.0 QUERY /orders?x=execute\r\n\r\n",
			"QUERY", "/orders?x=execute", "/orders", "x=execute", nil, ""},
		{"empty query", "AGTP/1.0 QUERY /a?\r\n\r\n", "QUERY", "/a?", "/a", "", nil, ""},
		{"sub-delims and colon in path", "AGTP/1.0 QUERY /a:b@c!$&'()*+,;=-._~\r\n\r\n",
			"QUERY", "/a:b@c!$&'()*+,;=-._~", "/a:b@c!$&'()*+,;=-._~", "", nil, ""},
		{"trailing slash kept", "AGTP/1.0 QUERY /a/\r\n\r\n", "QUERY", "/a/", "/a/", "", nil, ""},
		{"unknown valid method passes the wire", "AGTP/1.0 FROBNICATE /a\r\n\r\n", "FROBNICATE", "/a", "/a", "", nil, ""},
		{"names canonicalised, values trimmed",
			"AGTP/1.0 QUERY /a\r\nagent-id:abc\r\nTASK-ID: \t t-1 \t\r\nX-Foo: bar baz\r\nX-Empty:\r\n\r\n",
			"QUERY", "/a", "/a", "",
			Header{{HeaderAgentID, "abc"}, {HeaderTaskID, "t-1"}, {"X-Foo", "bar baz"}, {"X-Empty", ""}}, ""},
		{"body by Content-Length",
			"AGTP/1.0 EXECUTE /x\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 2\r\n\r\n{}",
			"EXECUTE", "/x", "/x", "",
			Header{{HeaderContentType, MediaTypeJSON}, {HeaderContentLength, "2"}}, "{}"},
		{"Content-Length 0 with Content-Type",
			"AGTP/1.0 QUERY /a\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 0\r\n\r\n",
			"QUERY", "/a", "/a", "", Header{{HeaderContentType, MediaTypeJSON}, {HeaderContentLength, "0"}}, ""},
		{"identical duplicate Content-Length",
			"AGTP/1.0 QUERY /a\r\nContent-Length: 3\r\ncontent-length: 003\r\nContent-Type: text/plain\r\n\r\nabc",
			"QUERY", "/a", "/a", "",
			Header{{HeaderContentLength, "3"}, {HeaderContentLength, "003"}, {HeaderContentType, "text/plain"}}, "abc"},
		{"bare LF line endings",
			"AGTP/1.0 QUERY /a\nTask-ID: t\nContent-Length: 1\nContent-Type: text/plain\n\nx",
			"QUERY", "/a", "/a", "",
			Header{{HeaderTaskID, "t"}, {HeaderContentLength, "1"}, {HeaderContentType, "text/plain"}}, "x"},
		{"mixed line endings", "AGTP/1.0 QUERY /a\r\nTask-ID: t\n\r\n",
			"QUERY", "/a", "/a", "", Header{{HeaderTaskID, "t"}}, ""},
		{"obs-text in value", "AGTP/1.0 QUERY /a\r\nX-Name: caf\xc3\xa9\r\n\r\n",
			"QUERY", "/a", "/a", "", Header{{"X-Name", "caf\xc3\xa9"}}, ""},
		{"reserved fields accepted", "AGTP/1.0 QUERY /a\r\nPriority: normal\r\nTTL: 5000\r\nBudget-Limit: tokens=10\r\n\r\n",
			"QUERY", "/a", "/a", "", Header{{HeaderPriority, "normal"}, {HeaderTTL, "5000"}, {HeaderBudgetLimit, "tokens=10"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := readReq(t, tt.in, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if req.Method != tt.method || req.Target != tt.target || req.Path != tt.path || req.RawQuery != tt.query {
				t.Errorf("got %q %q path %q query %q, want %q %q path %q query %q",
					req.Method, req.Target, req.Path, req.RawQuery, tt.method, tt.target, tt.path, tt.query)
			}
			if !equalHeader(req.Header, tt.header) {
				t.Errorf("header = %q, want %q", req.Header, tt.header)
			}
			if string(req.Body) != tt.body {
				t.Errorf("body = %q, want %q", req.Body, tt.body)
			}
			if tt.body == "" && req.Body != nil {
				t.Error("no body must give a nil Body")
			}
		})
	}
}

func equalHeader(a, b Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReadRequestEOF(t *testing.T) {
	tests := []struct {
		name, in string
		want     error
	}{
		{"clean EOF before any byte", "", io.EOF},
		{"EOF inside request line", "AGTP/1.0 QU", io.ErrUnexpectedEOF},
		{"EOF after request line", "AGTP/1.0 QUERY /\r\n", io.ErrUnexpectedEOF},
		{"EOF inside a field line", "AGTP/1.0 QUERY /\r\nTask-ID: 1", io.ErrUnexpectedEOF},
		{"EOF before the empty line", "AGTP/1.0 QUERY /\r\nTask-ID: 1\r\n", io.ErrUnexpectedEOF},
		{"EOF inside the body", "AGTP/1.0 QUERY /\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nab", io.ErrUnexpectedEOF},
		{"EOF before the body", "AGTP/1.0 QUERY /\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\n", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readReq(t, tt.in, Limits{})
			if err != tt.want {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestReadRequestPipelined(t *testing.T) {
	in := "AGTP/1.0 QUERY /one\r\nTask-ID: 1\r\n\r\n" +
		"AGTP/1.0 EXECUTE /two\nContent-Type: application/vnd.agtp+json\nContent-Length: 9\n\n{\"a\":\"b\"}" +
		"AGTP/1.0 query /three\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nxyz" + // 459, body consumed
		"AGTP/1.0 DISCOVER\r\nPrincipal-ID: p\r\n\r\n" + // retired-header, consumed
		"AGTP/1.0 DESCRIBE /five\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(in))
	type want struct {
		method, path, body string
		status             int
	}
	for i, w := range []want{
		{"QUERY", "/one", "", 0},
		{"EXECUTE", "/two", `{"a":"b"}`, 0},
		{"query", "/three", "xyz", 459},
		{"DISCOVER", "/", "", 400},
		{"DESCRIBE", "/five", "", 0},
	} {
		req, err := ReadRequest(br, Limits{})
		if w.status != 0 {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Status != w.status || pe.CloseConnection {
				t.Fatalf("request %d: err = %v, want a non-closing %d", i, err, w.status)
			}
		} else if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if req.Method != w.method || req.Path != w.path || string(req.Body) != w.body {
			t.Fatalf("request %d = %s %s %q, want %s %s %q", i, req.Method, req.Path, req.Body, w.method, w.path, w.body)
		}
	}
	if _, err := ReadRequest(br, Limits{}); err != io.EOF {
		t.Fatalf("after the last request: %v, want io.EOF", err)
	}
}

// TestLimitsExact pins each limit at exactly the limit (accepted) and one
// byte or field past it (400 naming the limit, connection closed).
func TestLimitsExact(t *testing.T) {
	line := func(n int) string { // a request line of exactly n bytes
		return "AGTP/1.0 QUERY /" + strings.Repeat("a", n-len("AGTP/1.0 QUERY /"))
	}
	fields := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString("X-F" + strconv.Itoa(i) + ": v\r\n")
		}
		return b.String()
	}
	const section = "Task-ID: 1234\r\n\r\n" // 17 bytes of header section
	tests := []struct {
		name   string
		in     string
		lim    Limits
		reason string // "" = accepted
	}{
		{"request line at limit CRLF", line(64) + "\r\n\r\n", Limits{MaxRequestLine: 64}, ""},
		{"request line at limit LF", line(64) + "\n\n", Limits{MaxRequestLine: 64}, ""},
		{"request line over limit", line(65) + "\r\n\r\n", Limits{MaxRequestLine: 64}, ReasonRequestLineTooLong},
		{"request line over limit LF", line(65) + "\n\n", Limits{MaxRequestLine: 64}, ReasonRequestLineTooLong},
		{"default request line at 8 KiB", line(8192) + "\r\n\r\n", Limits{}, ""},
		{"default request line over 8 KiB", line(8193) + "\r\n\r\n", Limits{}, ReasonRequestLineTooLong},
		{"header section at limit", "AGTP/1.0 QUERY /\r\n" + section, Limits{MaxHeaderBytes: len(section)}, ""},
		{"header section over limit", "AGTP/1.0 QUERY /\r\n" + section, Limits{MaxHeaderBytes: len(section) - 1}, ReasonHeaderSectionTooLarge},
		{"header section of one long field", "AGTP/1.0 QUERY /\r\nX-Big: " + strings.Repeat("v", 70<<10) + "\r\n\r\n", Limits{}, ReasonHeaderSectionTooLarge},
		{"fields at limit", "AGTP/1.0 QUERY /\r\n" + fields(5) + "\r\n", Limits{MaxHeaderFields: 5}, ""},
		{"fields over limit", "AGTP/1.0 QUERY /\r\n" + fields(6) + "\r\n", Limits{MaxHeaderFields: 5}, ReasonTooManyHeaderFields},
		{"default fields at 100", "AGTP/1.0 QUERY /\r\n" + fields(100) + "\r\n", Limits{}, ""},
		{"default fields over 100", "AGTP/1.0 QUERY /\r\n" + fields(101) + "\r\n", Limits{}, ReasonTooManyHeaderFields},
		{"body at limit", "AGTP/1.0 QUERY /\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\n0123456789", Limits{MaxBody: 10}, ""},
		{"body over limit", "AGTP/1.0 QUERY /\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n0123456789a", Limits{MaxBody: 10}, ReasonBodyTooLarge},
		{"default body at 1 MiB", "AGTP/1.0 QUERY /\r\nContent-Type: text/plain\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat("b", 1<<20), Limits{}, ""},
		{"default body over 1 MiB", "AGTP/1.0 QUERY /\r\nContent-Type: text/plain\r\nContent-Length: 1048577\r\n\r\n", Limits{}, ReasonBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readReq(t, tt.in, tt.lim)
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantProtocolError(t, err, StatusBadRequest, tt.reason, true)
		})
	}
}

func TestBodyLimitPerEndpoint(t *testing.T) {
	lim := Limits{MaxBody: 4, BodyLimit: func(method, path string) int64 {
		switch path {
		case "/upload":
			return 16
		case "/nobody":
			return 0
		}
		return 4
	}}
	msg := func(path string, n int) string {
		return "AGTP/1.0 EXECUTE " + path + "\r\nContent-Type: text/plain\r\nContent-Length: " +
			strconv.Itoa(n) + "\r\n\r\n" + strings.Repeat("x", n)
	}
	if _, err := readReq(t, msg("/upload", 16), lim); err != nil {
		t.Errorf("endpoint override above MaxBody: %v", err)
	}
	req, err := readReq(t, msg("/other", 5), lim)
	wantProtocolError(t, err, 400, ReasonBodyTooLarge, true)
	if req == nil || req.Path != "/other" {
		t.Error("a body-too-large error should return the request head for the error response")
	}
	_, err = readReq(t, msg("/nobody", 1), lim)
	wantProtocolError(t, err, 400, ReasonBodyTooLarge, true)
	if _, err := readReq(t, msg("/nobody", 0), lim); err != nil {
		t.Errorf("a limit of 0 still allows an empty body: %v", err)
	}
}

// A request without a body is never refused by its limit, so the server's
// per-request lookup is not made for it.
func TestBodyLimitAskedOnlyForABody(t *testing.T) {
	for _, tt := range []struct {
		name, msg string
		asked     int
	}{
		{"no Content-Length", "AGTP/1.0 QUERY /orders/o-1\r\n\r\n", 0},
		{"Content-Length 0", "AGTP/1.0 QUERY /orders/o-1\r\nContent-Length: 0\r\n\r\n", 0},
		{"a body", "AGTP/1.0 QUERY /orders/o-1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			lim := Limits{BodyLimit: func(string, string) int64 { asked++; return 0 }}
			_, err := ReadRequestHead(bufio.NewReader(strings.NewReader(tt.msg)), lim)
			if asked != tt.asked {
				t.Errorf("BodyLimit called %d times, want %d", asked, tt.asked)
			}
			if (err == nil) != (tt.asked == 0) {
				t.Errorf("err = %v", err)
			}
		})
	}
}

// endless yields the same byte forever and counts what was read.
type endless struct {
	b byte
	n int
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.b
	}
	e.n += len(p)
	return len(p), nil
}

// TestNeverReadsUnboundedLine pins that a peer sending an endless line
// costs at most the limit plus one reader buffer.
func TestNeverReadsUnboundedLine(t *testing.T) {
	src := &endless{b: 'A'}
	_, err := ReadRequest(bufio.NewReader(src), Limits{})
	wantProtocolError(t, err, 400, ReasonRequestLineTooLong, true)
	if src.n > DefaultMaxRequestLine+2+4096 {
		t.Errorf("read %d bytes for an endless request line", src.n)
	}

	hdr := io.MultiReader(strings.NewReader("AGTP/1.0 QUERY /\r\nX: "), &endless{b: 'v'})
	_, err = ReadRequest(bufio.NewReader(hdr), Limits{})
	wantProtocolError(t, err, 400, ReasonHeaderSectionTooLarge, true)
}

func TestReadRequestKeepsFieldsPastInlineStorage(t *testing.T) {
	var b strings.Builder
	b.WriteString("AGTP/1.0 QUERY /\r\n")
	for i := range 40 {
		b.WriteString("X-N" + strconv.Itoa(i) + ": " + strconv.Itoa(i) + "\r\n")
	}
	b.WriteString("\r\n")
	req, err := readReq(t, b.String(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Header) != 40 || req.Header.Get("x-n39") != "39" {
		t.Fatalf("got %d fields, X-N39=%q", len(req.Header), req.Header.Get("X-N39"))
	}
}

// errStall stands for a peer that stops sending (a read deadline).
var errStall = errors.New("stalled")

// TestBodyBufferGrowsAsBytesArrive pins that a body's buffer follows the
// bytes that arrived, not the Content-Length announced: at most twice what
// arrived, or firstBodyStep, and exactly Content-Length once complete.
func TestBodyBufferGrowsAsBytesArrive(t *testing.T) {
	const mib = 1 << 20
	head := func(n int) string {
		return "AGTP/1.0 EXECUTE /upload\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n"
	}
	body := func(n int) string { return strings.Repeat("b", n) }
	tests := []struct {
		name      string
		announced int
		in        io.Reader // after the head
		oneByte   bool      // deliver a byte per read
		wantErr   error     // nil: body complete
		wantGrown int       // exact sum of growths when > 0
		maxGrown  int       // otherwise, its bound
	}{
		{"small body, one allocation of its size", 85, strings.NewReader(body(85)), false, nil, 85, 0},
		{"1 MiB body, capacity exactly its size", mib, strings.NewReader(body(mib)), false, nil, mib, 0},
		{"1 MiB body a byte at a time", mib, strings.NewReader(body(mib)), true, nil, mib, 0},
		{"body at the step size", firstBodyStep, strings.NewReader(body(firstBodyStep)), false, nil, firstBodyStep, 0},
		{"nothing sent", mib, iotest.ErrReader(errStall), false, errStall, 0, 0},
		{"one byte sent", mib, io.MultiReader(strings.NewReader("b"), iotest.ErrReader(errStall)), false, errStall, 0, firstBodyStep},
		{"short body then end of input", mib, strings.NewReader(body(100)), false, io.ErrUnexpectedEOF, 0, firstBodyStep},
		{"300 KiB of 1 MiB then stall", mib, io.MultiReader(strings.NewReader(body(300<<10)), iotest.ErrReader(errStall)), false, errStall, 0, 2 * 300 << 10},
		{"300 KiB of 1 MiB a byte at a time", mib, io.MultiReader(iotest.OneByteReader(strings.NewReader(body(300<<10))), iotest.ErrReader(errStall)), false, errStall, 0, 2 * 300 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := io.MultiReader(strings.NewReader(head(tt.announced)), tt.in)
			if tt.oneByte {
				in = iotest.OneByteReader(in)
			}
			br := bufio.NewReader(in)
			h, err := ReadRequestHead(br, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if h.ContentLength != int64(tt.announced) || h.Request.Body != nil {
				t.Fatalf("head: ContentLength %d, body %d bytes", h.ContentLength, len(h.Request.Body))
			}
			grown, calls := 0, 0
			req, err := h.ReadBody(br, func(n int) error {
				if n <= 0 {
					t.Errorf("grow(%d)", n)
				}
				grown += n
				calls++
				return nil
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			switch {
			case tt.wantErr != nil:
				if req != nil {
					t.Error("a failed body read returned a request")
				}
			case len(req.Body) != tt.announced || cap(req.Body) != tt.announced || string(req.Body) != body(tt.announced):
				t.Fatalf("body %d bytes, capacity %d, want exactly %d", len(req.Body), cap(req.Body), tt.announced)
			}
			if tt.wantGrown > 0 && grown != tt.wantGrown {
				t.Errorf("grew by %d bytes in %d steps, want %d", grown, calls, tt.wantGrown)
			}
			if tt.wantGrown == 0 && grown > tt.maxGrown {
				t.Errorf("grew by %d bytes in %d steps for a body that did not arrive, bound %d", grown, calls, tt.maxGrown)
			}
		})
	}
}

// A body over the limit is refused from the head, before any buffer is
// reserved; the body read of a request within it stops at the first
// growth its caller refuses.
func TestBodyLimitAndRefusedGrowth(t *testing.T) {
	const msg = "AGTP/1.0 EXECUTE /upload\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n0123456789a"
	tests := []struct {
		name    string
		lim     Limits
		refuse  int // refuse the growth call with this index (0 = first); -1 none
		wantErr string
	}{
		{"over the limit by one byte", Limits{MaxBody: 10}, -1, ReasonBodyTooLarge},
		{"over a per-endpoint limit of 0", Limits{BodyLimit: func(string, string) int64 { return 0 }}, -1, ReasonBodyTooLarge},
		{"at the limit, growth refused", Limits{MaxBody: 11}, 0, "refused"},
		{"at the limit, growth allowed", Limits{MaxBody: 11}, -1, ""},
	}
	errRefused := errors.New("refused")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(msg))
			h, err := ReadRequestHead(br, tt.lim)
			if tt.wantErr == ReasonBodyTooLarge {
				wantProtocolError(t, err, StatusBadRequest, ReasonBodyTooLarge, true)
				if h.Request == nil || h.Request.Path != "/upload" || h.Request.Body != nil {
					t.Fatalf("head of a refused body: %+v", h.Request)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			req, err := h.ReadBody(br, func(int) error {
				calls++
				if calls-1 == tt.refuse {
					return errRefused
				}
				return nil
			})
			if tt.wantErr == "" {
				if err != nil || string(req.Body) != "0123456789a" {
					t.Fatalf("got %v %q", err, req.Body)
				}
				return
			}
			if !errors.Is(err, errRefused) || req != nil {
				t.Fatalf("got %v, request %v; want the growth's error", err, req)
			}
		})
	}
}

// DiscardBody leaves the reader at the next message without keeping the
// body; ReadBody and DiscardBody report the checks ReadRequest makes after
// the body in the same way.
func TestHeadThenBody(t *testing.T) {
	next := "AGTP/1.0 QUERY /next\r\n\r\n"
	withBody := "AGTP/1.0 EXECUTE /x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
	tests := []struct {
		name    string
		in      string
		discard bool
		status  int // 0: no error from ReadBody
		reason  string
	}{
		{"discard then next", withBody + next, true, 0, ""},
		{"read then next", withBody + next, false, 0, ""},
		{"discard without a body", next + next, true, 0, ""},
		{"retired field after the body", "AGTP/1.0 EXECUTE /x\r\nAGTP-Version: 1.0\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello" + next, false, StatusBadRequest, ReasonRetiredHeader},
		{"invalid method after the body", "AGTP/1.0 frob /x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello" + next, false, StatusMethodViolation, ReasonMethodInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.in))
			h, err := ReadRequestHead(br, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if tt.discard {
				if err := h.DiscardBody(br); err != nil {
					t.Fatal(err)
				}
			} else {
				req, err := h.ReadBody(br, nil)
				if tt.status != 0 {
					wantProtocolError(t, err, tt.status, tt.reason, false)
				} else if err != nil {
					t.Fatal(err)
				}
				if req == nil || req.Body == nil {
					t.Fatalf("request %+v: body not read", req)
				}
			}
			req, err := ReadRequest(br, Limits{})
			if err != nil || req.Path != "/next" {
				t.Fatalf("next request: %v %+v", err, req)
			}
		})
	}

	br := bufio.NewReader(strings.NewReader(withBody[:len(withBody)-2]))
	h, err := ReadRequestHead(br, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.DiscardBody(br); err != io.ErrUnexpectedEOF {
		t.Fatalf("discarding a short body: %v, want io.ErrUnexpectedEOF", err)
	}
}
