package taskrun

import (
	"context"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

const agent = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"

func TestRetryDecisions(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	s := New(rdb, time.Hour)
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		name        string
		run         Run
		status      int  // recorded at Record
		complete    int  // set by Complete when > 0
		staleToken  bool // Complete with another token
		maxAttempts int
		delay       time.Duration
		at          time.Time
		want        string
		wantAttempt int
	}{
		{name: "non-idempotent succeeded", run: Run{Method: "CREATE", Target: "/orders"}, complete: 201, want: AlreadySucceeded, wantAttempt: 1},
		{name: "non-idempotent failed", run: Run{Method: "CREATE", Target: "/orders", Body: []byte(`{"a":1}`)}, complete: 503, want: Allowed, wantAttempt: 2},
		{name: "non-idempotent refused by policy", run: Run{Method: "CREATE", Target: "/orders"}, status: 262, want: Allowed, wantAttempt: 2},
		{name: "non-idempotent outcome unknown", run: Run{Method: "CREATE", Target: "/orders"}, want: OutcomeUnknown, wantAttempt: 1},
		{name: "non-idempotent unknown with key", run: Run{Method: "CREATE", Target: "/orders", IdempotencyKey: "k-1"}, want: Allowed, wantAttempt: 2},
		{name: "stale completion ignored", run: Run{Method: "CREATE", Target: "/orders"}, complete: 201, staleToken: true, want: OutcomeUnknown, wantAttempt: 1},
		{name: "idempotent succeeded", run: Run{Method: "QUERY", Target: "/orders?x=1", Idempotent: true}, complete: 200, want: Allowed, wantAttempt: 2},
		{name: "max attempts reached", run: Run{Method: "QUERY", Target: "/orders", Idempotent: true}, maxAttempts: 1, want: AttemptsExceeded, wantAttempt: 1},
		{name: "delay not passed", run: Run{Method: "QUERY", Target: "/orders", Idempotent: true}, delay: 5 * time.Second, at: t0.Add(2 * time.Second), want: Delayed, wantAttempt: 1},
		{name: "delay passed", run: Run{Method: "QUERY", Target: "/orders", Idempotent: true}, delay: 5 * time.Second, at: t0.Add(6 * time.Second), want: Allowed, wantAttempt: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run.TaskID = "task-" + tc.name
			if err := tc.run.Validate(); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Record(ctx, agent, &tc.run, tc.status, "tok-1", t0); !ok || err != nil {
				t.Fatalf("Record = %v, %v", ok, err)
			}
			if tc.complete > 0 {
				tok := "tok-1"
				if tc.staleToken {
					tok = "tok-2"
				}
				ok, err := s.Complete(ctx, agent, tc.run.TaskID, tok, tc.complete)
				if err != nil || ok == tc.staleToken {
					t.Fatalf("Complete = %v, %v", ok, err)
				}
			}
			at := tc.at
			if at.IsZero() {
				at = t0.Add(time.Second)
			}
			d, err := s.Retry(ctx, agent, tc.run.TaskID, tc.maxAttempts, tc.delay, at)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != tc.want || d.Attempt != tc.wantAttempt {
				t.Fatalf("Retry = %s attempt %d, want %s attempt %d", d.Verdict, d.Attempt, tc.want, tc.wantAttempt)
			}
			if tc.want == Delayed && d.Wait != 3*time.Second {
				t.Fatalf("wait = %v, want 3s", d.Wait)
			}
			if tc.want == Allowed {
				got := d.Run
				if got.Method != tc.run.Method || got.Target != tc.run.Target || string(got.Body) != string(tc.run.Body) ||
					got.IdempotencyKey != tc.run.IdempotencyKey || got.Idempotent != tc.run.Idempotent {
					t.Fatalf("run = %+v, want %+v", got, tc.run)
				}
			}
		})
	}

	t.Run("unknown and other agent", func(t *testing.T) {
		run := Run{TaskID: "mine", Method: "QUERY", Target: "/x", Idempotent: true}
		if ok, err := s.Record(ctx, agent, &run, 0, "tok", t0); !ok || err != nil {
			t.Fatalf("Record = %v, %v", ok, err)
		}
		for _, who := range []string{agent, "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"} {
			task := "mine"
			if who == agent {
				task = "unknown"
			}
			d, err := s.Retry(ctx, who, task, 0, 0, t0)
			if err != nil || d.Verdict != NotFound {
				t.Fatalf("Retry(%s, %s) = %+v, %v; want not found", who[:4], task, d, err)
			}
		}
	})

	t.Run("attempts count across retries and expire with the entry", func(t *testing.T) {
		run := Run{TaskID: "counted", Method: "QUERY", Target: "/x", Idempotent: true}
		if ok, err := s.Record(ctx, agent, &run, 0, "tok", t0); !ok || err != nil {
			t.Fatalf("Record = %v, %v", ok, err)
		}
		for want := 2; want <= 3; want++ {
			d, err := s.Retry(ctx, agent, "counted", 3, 0, t0)
			if err != nil || d.Verdict != Allowed || d.Attempt != want {
				t.Fatalf("retry %d = %+v, %v", want, d, err)
			}
		}
		if d, _ := s.Retry(ctx, agent, "counted", 3, 0, t0); d.Verdict != AttemptsExceeded || d.Attempt != 3 {
			t.Fatalf("fourth attempt = %+v, want exhausted after 3", d)
		}
		ttl := rdb.PTTL(ctx, rediskeys.TaskRun(agent, "counted")).Val()
		if ttl <= 0 || ttl > time.Hour {
			t.Fatalf("ttl = %v, want within 1h", ttl)
		}
	})
}

// A later request under a Task-ID replaces its entry, except one a RETRY
// must not lose: a non-idempotent request that succeeded, or one whose
// outcome is not in yet (its completion must still land). A refused
// duplicate did nothing, and replacing such an entry with it would have
// RETRY repeat the effect (standard methods §8.5).
func TestRecordKeepsWhatARetryMustNotRepeat(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	s := New(rdb, time.Hour)
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	create := Run{Method: "CREATE", Target: "/orders", Body: []byte(`{"a":1}`)}
	query := Run{Method: "QUERY", Target: "/orders", Idempotent: true}
	for _, tc := range []struct {
		name     string
		first    Run
		complete int // the first request's outcome; 0: not in yet
		// then a refused request under the same Task-ID, and the first
		// request's completion when it was not in yet (201)
		replaced bool
		want     string
		status   int
	}{
		{"a success stands", create, 201, false, AlreadySucceeded, 201},
		{"an outcome not in yet stands and lands", create, 0, false, AlreadySucceeded, 201},
		{"a failure is replaced", create, 503, true, Allowed, 429},
		{"an idempotent request is replaced", query, 200, true, Allowed, 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := "task-" + tc.name
			first := tc.first
			first.TaskID = task
			if ok, err := s.Record(ctx, agent, &first, 0, "tok-1", t0); !ok || err != nil {
				t.Fatalf("Record = %v, %v", ok, err)
			}
			if tc.complete > 0 {
				if ok, err := s.Complete(ctx, agent, task, "tok-1", tc.complete); !ok || err != nil {
					t.Fatalf("Complete = %v, %v", ok, err)
				}
			}
			refused := create
			refused.TaskID = task
			ok, err := s.Record(ctx, agent, &refused, 429, "", t0.Add(time.Second))
			if err != nil || ok != tc.replaced {
				t.Fatalf("Record of the refused request = %v, %v; want %v", ok, err, tc.replaced)
			}
			if tc.complete == 0 {
				if ok, err := s.Complete(ctx, agent, task, "tok-1", 201); !ok || err != nil {
					t.Fatalf("the first request's completion = %v, %v; want it to land", ok, err)
				}
			}
			d, err := s.Retry(ctx, agent, task, 0, 0, t0.Add(2*time.Second))
			if err != nil || d.Verdict != tc.want || d.PreviousStatus != tc.status {
				t.Fatalf("Retry = %+v, %v; want %s after status %d", d, err, tc.want, tc.status)
			}
		})
	}

	t.Run("a re-sent record finds its own entry", func(t *testing.T) {
		run := create
		run.TaskID = "resent"
		for range 2 {
			if ok, err := s.Record(ctx, agent, &run, 0, "tok-1", t0); !ok || err != nil {
				t.Fatalf("Record = %v, %v; want the entry the request's own", ok, err)
			}
		}
		if ok, err := s.Complete(ctx, agent, "resent", "tok-1", 201); !ok || err != nil {
			t.Fatalf("Complete = %v, %v", ok, err)
		}
	})
}

func TestValidateBoundsTheEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  Run
	}{
		{"no task", Run{Method: "QUERY", Target: "/"}},
		{"long task", Run{TaskID: string(make([]byte, MaxTaskID+1)), Method: "QUERY", Target: "/"}},
		{"relative target", Run{TaskID: "t", Method: "QUERY", Target: "x"}},
		{"large body", Run{TaskID: "t", Method: "QUERY", Target: "/", Body: make([]byte, MaxBody+1)}},
	} {
		if tc.run.Validate() == nil {
			t.Errorf("%s: Validate accepted %+v", tc.name, tc.run.TaskID)
		}
	}
}
