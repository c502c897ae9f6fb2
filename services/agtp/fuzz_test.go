package agtp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// fuzzLimits are small so that the fuzzer reaches every limit.
var fuzzLimits = Limits{MaxRequestLine: 256, MaxHeaderBytes: 512, MaxHeaderFields: 8, MaxBody: 256}

// comparableHeader drops what Write leaves out or adds, so that a message read
// back after writing can be compared with the one written.
func comparableHeader(h Header, hasBody bool) Header {
	var out Header
	for _, f := range h {
		if !dropped(f.Name, hasBody) {
			out = append(out, f)
		}
	}
	return out
}

// FuzzReadRequest reads pipelined requests from arbitrary bytes and
// checks that nothing panics, that accepted requests obey the grammar,
// and that every accepted request survives Write and a second read.
func FuzzReadRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		// The same bytes through both read paths: all buffered, and a byte
		// at a time into a tiny buffer (line by line, long lines split).
		fast := bufio.NewReader(bytes.NewReader(data))
		slow := bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(data)), 16)
		for range 8 {
			req, err := ReadRequest(fast, fuzzLimits)
			req2, err2 := ReadRequest(slow, fuzzLimits)
			if msg := sameOutcome(req, err, req2, err2); msg != "" {
				t.Fatalf("read paths differ: %s", msg)
			}
			var pe *ProtocolError
			if errors.As(err, &pe) {
				if pe.Status != 400 && pe.Status != 459 || pe.Reason == "" {
					t.Fatalf("unexpected error %+v", pe)
				}
				if pe.CloseConnection {
					return
				}
				if req == nil {
					t.Fatal("non-closing error without a request")
				}
			} else if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			checkRequest(t, req, err)
		}
	})
}

func checkRequest(t *testing.T, req *Request, readErr error) {
	if readErr == nil && !ValidMethodToken(req.Method) {
		t.Fatalf("accepted method %q", req.Method)
	}
	if req.Path == "" || req.Path[0] != '/' || bytes.IndexByte([]byte(req.Path), '?') >= 0 {
		t.Fatalf("bad path %q", req.Path)
	}
	if req.Target != req.Path && req.Target != req.Path+"?"+req.RawQuery {
		t.Fatalf("target %q does not split into %q and %q", req.Target, req.Path, req.RawQuery)
	}
	for _, f := range req.Header {
		if readErr == nil && IsRetired(f.Name) {
			t.Fatalf("accepted retired field %s", f.Name)
		}
		if !validToken(f.Name) || !validValue(f.Value) || trimOWS(f.Value) != f.Value {
			t.Fatalf("bad field %q", f)
		}
	}
	if int64(len(req.Body)) > fuzzLimits.MaxBody {
		t.Fatalf("body of %d bytes over the limit", len(req.Body))
	}

	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := req.Write(w); err != nil {
		if errors.Is(err, ErrMissingContentType) || errors.Is(err, ErrInvalidMethod) {
			return // readable but not writable: a body without type, a non-token method
		}
		t.Fatalf("cannot write a parsed request: %v", err)
	}
	w.Flush()
	back, err := ReadRequest(bufio.NewReader(&buf), Limits{})
	if err != nil && readErr == nil {
		t.Fatalf("re-reading %q: %v", buf.Bytes(), err)
	}
	if back == nil {
		t.Fatalf("re-reading %q lost the request: %v", buf.Bytes(), err)
	}
	hasBody := len(req.Body) > 0
	if back.Method != req.Method || back.Path != req.Path || back.RawQuery != req.RawQuery ||
		!bytes.Equal(back.Body, req.Body) ||
		!equalHeader(comparableHeader(back.Header, hasBody), comparableHeader(req.Header, hasBody)) {
		t.Fatalf("round trip changed the request:\n%+v\n%+v", req, back)
	}
}

// FuzzReadResponse checks responses the same way.
func FuzzReadResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fast := bufio.NewReader(bytes.NewReader(data))
		slow := bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(data)), 16)
		for range 8 {
			resp, err := ReadResponse(fast, fuzzLimits)
			resp2, err2 := ReadResponse(slow, fuzzLimits)
			if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() ||
				resp != nil && (resp.Status != resp2.Status || resp.StatusText != resp2.StatusText ||
					!bytes.Equal(resp.Body, resp2.Body) || !equalHeader(resp.Header, resp2.Header)) {
				t.Fatalf("read paths differ: %+v %v / %+v %v", resp, err, resp2, err2)
			}
			if err != nil {
				var pe *ProtocolError
				if errors.As(err, &pe) && !pe.CloseConnection {
					t.Fatalf("response errors always close: %+v", pe)
				}
				return
			}
			if resp.Status < 100 || resp.Status > 999 {
				t.Fatalf("status %d", resp.Status)
			}
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			if err := resp.Write(w); err != nil {
				if errors.Is(err, ErrMissingContentType) || errors.Is(err, ErrBodyNotAllowed) {
					continue
				}
				t.Fatalf("cannot write a parsed response: %v", err)
			}
			w.Flush()
			back, err := ReadResponse(bufio.NewReader(&buf), Limits{})
			if err != nil {
				t.Fatalf("re-reading %q: %v", buf.Bytes(), err)
			}
			hasBody := len(resp.Body) > 0
			if back.Status != resp.Status || !bytes.Equal(back.Body, resp.Body) ||
				resp.StatusText != "" && back.StatusText != resp.StatusText ||
				!equalHeader(comparableHeader(back.Header, hasBody), comparableHeader(resp.Header, hasBody)) {
				t.Fatalf("round trip changed the response:\n%+v\n%+v", resp, back)
			}
		}
	})
}

// FuzzParseURI checks that parsing never panics, errors carry one of
// the two draft reasons, and String round-trips.
func FuzzParseURI(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURI(s)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Status != 400 ||
				pe.Reason != ReasonInvalidURIForm && pe.Reason != ReasonInvalidCanonicalID {
				t.Fatalf("error %v", err)
			}
			return
		}
		back, err := ParseURI(u.String())
		if err != nil || back != u {
			t.Fatalf("%q -> %q -> %+v, %v (want %+v)", s, u.String(), back, err, u)
		}
		if c, _ := u.Canonical(); c.Path != "" {
			if _, err := ParseURI(c.String()); err != nil {
				t.Fatalf("canonical form %q of %q does not parse: %v", c.String(), s, err)
			}
		}
	})
}

// FuzzParseScopes checks that the emitted form parses to the same set
// and that every scope covers itself.
func FuzzParseScopes(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseScopes(s)
		if err != nil {
			return
		}
		back, err := ParseScopes(set.String())
		if err != nil || back.String() != set.String() || len(back) != len(set) {
			t.Fatalf("%q -> %q -> %v, %v", s, set.String(), back, err)
		}
		for _, sc := range set {
			if !sc.Covers(sc) {
				t.Fatalf("%s does not cover itself", sc)
			}
		}
	})
}

// FuzzParseBudget checks that the emitted form parses to the same items.
func FuzzParseBudget(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBudget(s)
		if err != nil {
			return
		}
		back, err := ParseBudget(b.String())
		if err != nil || len(back) != len(b) {
			t.Fatalf("%q -> %q -> %v, %v", s, b.String(), back, err)
		}
		for i := range b {
			if back[i] != b[i] {
				t.Fatalf("%q: item %d %+v became %+v", s, i, b[i], back[i])
			}
		}
	})
}
