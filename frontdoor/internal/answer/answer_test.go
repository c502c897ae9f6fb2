package answer

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// A failed internal call: unreachable is 503 naming the service, a
// failure inside it a masked 500, a refusal the service's own AGTP
// reason with its details.
func TestDependency(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		reason string
		detail string // what the service said; shown only for a refusal
		shown  bool
	}{
		{"unreachable", grpcerr.Unavailable("down", "the store at 10.0.0.7 is down"), agtp.StatusUnavailable, "policysvc-unavailable", "10.0.0.7", false},
		{"failed inside", grpcerr.Internal(errors.New("a panic at line 12")), agtp.StatusServerError, "internal", "line 12", false},
		{"refused", grpcerr.NotFound("task-not-found", "no task t-1"), agtp.StatusNotFound, "task-not-found", "no task t-1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Dependency(context.Background(), log, "policysvc", tc.err)
			if f.Status != tc.status || f.Reason != tc.reason {
				t.Fatalf("Dependency = %+v, want %d %s", f, tc.status, tc.reason)
			}
			if shown := strings.Contains(f.Explanation, tc.detail); shown != tc.shown {
				t.Fatalf("explanation %q shows %q: %v, want %v", f.Explanation, tc.detail, shown, tc.shown)
			}
		})
	}
}

func TestError(t *testing.T) {
	resp := Error("t-1", agtp.StatusNotFound, "not-found", "nothing here", map[string]any{"path": "/x"})
	var body map[string]any
	if err := json.Unmarshal(resp.Body, &body); err != nil || resp.Status != agtp.StatusNotFound {
		t.Fatalf("%d %s: %v", resp.Status, resp.Body, err)
	}
	if body["reason"] != "not-found" || body["task_id"] != "t-1" || body["path"] != "/x" {
		t.Fatalf("body = %v", body)
	}
}

func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{{`{"n":1}`, true}, {`{"n":1} {}`, false}, {`{"n":`, false}} {
		v, err := DecodeJSON([]byte(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("DecodeJSON(%s) = %v, %v", tc.in, v, err)
		}
		if m, _ := v.(map[string]any); tc.ok && m["n"] != json.Number("1") {
			t.Errorf("numbers are kept as json.Number: %#v", v)
		}
	}
}

// A derived key depends on both the parent's key and the invocation's
// place, and on nothing else.
func TestDerivedKey(t *testing.T) {
	a, b := DerivedKey("k", "step-1"), DerivedKey("k", "step-2")
	if a == b || a != DerivedKey("k", "step-1") || DerivedKey("k2", "step-1") == a || len(a) != 64 {
		t.Fatalf("DerivedKey: %s %s", a, b)
	}
}
