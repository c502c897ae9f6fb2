package builtin

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

func TestMonitorEvents(t *testing.T) {
	for _, tc := range []struct {
		body string
		want []string // nil: refused with monitor-events-invalid
	}{
		{`{"events":["*"]}`, []string{"*"}},
		{`{"events":"*"}`, []string{"*"}},
		{`{"events":["suspended","revoked"]}`, []string{"suspended", "revoked"}},
		{`{"events":["activated","suspended","revoked","deprecated","reinstated"]}`, monitorEventNames},
		{`{}`, nil},
		{`{"events":[]}`, nil},
		{`{"events":["cpu_high"]}`, nil},
		{`{"events":["*","suspended"]}`, nil},
		{`{"events":["suspended","suspended"]}`, nil},
		{`{"events":[1]}`, nil},
		{`{"events":{"a":1}}`, nil},
		{`{"events":["a","b","c","d","e","f"]}`, nil},
	} {
		var params map[string]any
		if err := json.Unmarshal([]byte(tc.body), &params); err != nil {
			t.Fatal(err)
		}
		got, resp := monitorEvents(context.Background(), &Call{Header: &agtp.Header{}}, params)
		switch {
		case tc.want == nil && (resp == nil || resp.Status != agtp.StatusBadRequest || !json.Valid(resp.Body)):
			t.Errorf("%s: accepted %v", tc.body, got)
		case tc.want != nil && (resp != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%s: got %v, refused %v", tc.body, got, resp)
		}
	}
}

func TestIsMonitorCancel(t *testing.T) {
	for body, want := range map[string]bool{
		`{"recipient":"x","content":{"event_type":"monitor_cancel","subscription_id":"mon-1"}}`: true,
		`{"recipient":"x","content":{"event_type":"monitor_cancel"}}`:                           true,
		`{"recipient":"x","content":{"event_type":"order_shipped"}}`:                            false,
		`{"recipient":"x","content":"monitor_cancel"}`:                                          false,
		`{"recipient":"x","event_type":"monitor_cancel","content":{}}`:                          false,
	} {
		var params map[string]any
		if err := json.Unmarshal([]byte(body), &params); err != nil {
			t.Fatal(err)
		}
		if got := isMonitorCancel(params); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}
