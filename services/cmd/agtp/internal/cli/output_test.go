package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

// TestJSONOutput checks --json prints one object a script can take apart:
// status, fields in wire order and the body as JSON, text or base64.
func TestJSONOutput(t *testing.T) {
	srv := startServer(t, func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		switch req.Path {
		case "/json":
			r := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, []byte("{\n  \"a\": [1, 2]\n}"))
			r.Header.Add("Link", "</one>")
			r.Header.Add("Link", "</two>")
			return r
		case "/text":
			return agtp.NewResponse(agtp.StatusOK, "text/plain", []byte("héllo\n"))
		case "/binary":
			return agtp.NewResponse(agtp.StatusOK, "application/octet-stream", []byte{0, 1, 2, 0xff})
		}
		return agtp.NewErrorResponse(agtp.StatusNotFound, "no-such-endpoint", "nothing here")
	})
	cases := []struct {
		path     string
		wantCode int
		check    func(t *testing.T, got jsonResponse)
	}{
		{"/json", ExitOK, func(t *testing.T, got jsonResponse) {
			if string(got.Body) != `{"a":[1,2]}` || got.BodyText != nil || got.BodyBase64 != nil {
				t.Errorf("body %s", got.Body)
			}
			var links []string
			for _, f := range got.Header {
				if f.Name == "Link" {
					links = append(links, f.Value)
				}
			}
			if strings.Join(links, ",") != "</one>,</two>" {
				t.Errorf("repeated fields %v, want both in wire order", links)
			}
		}},
		{"/text", ExitOK, func(t *testing.T, got jsonResponse) {
			if got.BodyText == nil || *got.BodyText != "héllo\n" || got.Body != nil {
				t.Errorf("text body %+v", got)
			}
		}},
		{"/binary", ExitOK, func(t *testing.T, got jsonResponse) {
			if !bytes.Equal(got.BodyBase64, []byte{0, 1, 2, 0xff}) || got.BodyText != nil {
				t.Errorf("binary body %+v", got)
			}
		}},
		{"/missing", ExitClientError, func(t *testing.T, got jsonResponse) {
			var body agtp.ErrorBody
			if got.Status != 404 || got.StatusText != "Not Found" || json.Unmarshal(got.Body, &body) != nil || body.Reason != "no-such-endpoint" {
				t.Errorf("error answer %+v", got)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			r := run(t, "", true, "--cacert", srv.ca, "--json", "QUERY", srv.uri(tc.path))
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.wantCode, r.stderr)
			}
			if strings.Count(r.stdout, "\n") != 1 {
				t.Fatalf("want one line of JSON, got %q", r.stdout)
			}
			var got jsonResponse
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("stdout is not the JSON form: %v\n%s", err, r.stdout)
			}
			tc.check(t, got)
		})
	}
	if r := run(t, "", false, "--cacert", srv.ca, "--json", "-i", "QUERY", srv.uri("/json")); r.code != ExitError {
		t.Errorf("--json with -i: exit %d, want a usage error", r.code)
	}
}

// TestRetryHonoursRetryAfter checks --retry waits out a 429 for a
// request that is safe to repeat, and not for one that is not.
func TestRetryHonoursRetryAfter(t *testing.T) {
	var calls atomic.Int32
	srv := startServer(t, func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		if calls.Add(1)%2 == 1 {
			r := agtp.NewErrorResponse(agtp.StatusRateLimited, "rate-limited", "slow down")
			r.Header.Set("Retry-After", "0")
			return r
		}
		return agtp.NewResponse(agtp.StatusOK, "text/plain", []byte("ok"))
	})
	if r := run(t, "", false, "--cacert", srv.ca, "--retry", "2", "QUERY", srv.uri("/")); r.code != ExitOK || calls.Load() != 2 {
		t.Fatalf("QUERY with --retry: exit %d after %d calls: %s", r.code, calls.Load(), r.stderr)
	}
	calls.Store(0)
	if r := run(t, "", false, "--cacert", srv.ca, "--retry", "2", "EXECUTE", srv.uri("/")); r.code != ExitClientError || calls.Load() != 1 {
		t.Fatalf("EXECUTE without Idempotency-Key: exit %d after %d calls; it must not be repeated", r.code, calls.Load())
	}
	if r := run(t, "", false, "--retry", "-1", "QUERY", srv.uri("/")); r.code != ExitError {
		t.Errorf("--retry -1: exit %d, want a usage error", r.code)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := run(t, "", false, args...)
		if r.code != ExitOK || !strings.HasPrefix(r.stdout, "agtp ") ||
			!strings.Contains(r.stdout, agtp.Version) || !strings.Contains(r.stdout, agtp.SpecVersion) {
			t.Errorf("%v: exit %d, %q", args, r.code, r.stdout)
		}
	}
}
