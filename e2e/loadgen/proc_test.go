package loadgen

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// statusText is the tail of a real /proc/<pid>/task/<tid>/status, with
// the context-switch counts replaced.
func statusText(voluntary, nonvoluntary string) string {
	return "Name:\tfrontdoor\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4243\nThreads:\t9\n" +
		"Cpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n" +
		"voluntary_ctxt_switches:\t" + voluntary + "\nnonvoluntary_ctxt_switches:\t" + nonvoluntary + "\n"
}

func TestParseCtxSwitchesAddsVoluntaryAndInvoluntary(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  string
		want    uint64
		wantErr string
	}{
		{"both counts", statusText("1200", "34"), 1234, ""},
		{"zero", statusText("0", "0"), 0, ""},
		{"spaces instead of a tab", "voluntary_ctxt_switches:   7\nnonvoluntary_ctxt_switches: 3", 10, ""},
		{"involuntary first, no final newline", "nonvoluntary_ctxt_switches:\t5\nvoluntary_ctxt_switches:\t6", 11, ""},
		{"beyond 32 bits", statusText("4294967296", "1"), 4294967297, ""},
		{"no involuntary count", "Name:\tx\nvoluntary_ctxt_switches:\t5\n", 0, "no nonvoluntary_ctxt_switches"},
		{"no counts at all (a kernel without them)", "Name:\tx\nState:\tR (running)\n", 0, "no voluntary_ctxt_switches"},
		{"not a number", statusText("12x", "1"), 0, "voluntary_ctxt_switches"},
		{"negative", statusText("5", "-1"), 0, "nonvoluntary_ctxt_switches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCtxSwitches(tc.status)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %d, %v; want an error naming %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestCtxSwitchesCountsEveryThreadOfThisProcess ping-pongs between two
// goroutines locked to their own OS threads: every hand-over puts one
// thread to sleep on a futex and wakes the other, so each of the two
// threads switches at least once a round. Counting one thread only (what
// /proc/<pid>/status alone gives, the main thread's) would see about one
// switch a round, which the bound below rejects.
func TestCtxSwitchesCountsEveryThreadOfThisProcess(t *testing.T) {
	before, err := CtxSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// At least two switches a round, one on each thread; the bound is
	// under that, for the odd hand-over the runtime makes without
	// sleeping, and above what one thread alone makes.
	const rounds, want = 1000, 1500
	ping, pong := make(chan int), make(chan int)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for n := range ping {
			pong <- n
		}
		close(done)
	}()
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := range rounds {
			ping <- i
			<-pong
		}
		close(ping)
	}()
	<-done
	after, err := CtxSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if grew := after - before; after < before || grew < want {
		t.Fatalf("context switches went from %d to %d over %d ping-pong rounds between locked threads, want at least %d more",
			before, after, rounds, want)
	}
}

func TestParseRunqueueWait(t *testing.T) {
	for _, tc := range []struct {
		name, schedstat string
		want            uint64
		wantErr         bool
	}{
		{"a thread's line", "2330865040 1049874720 15342\n", 1049874720, false},
		{"never waited", "12 0 1\n", 0, false},
		{"beyond 32 bits", "1 4294967296 2", 4294967296, false},
		{"two fields", "1 2\n", 0, true},
		{"empty", "", 0, true},
		{"not a number", "1 2x 3", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRunqueueWait(tc.schedstat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestRunqueueWaitCountsThreadsQueuedForACPU runs four spinning threads
// per CPU for a while: at most one per CPU runs at a time, so the others
// wait on run queues for most of it, and the sum over this process's
// threads must show it. Counting the main thread alone, or the time on a
// CPU instead, would not reach the bound (a busier machine only adds
// waiting).
func TestRunqueueWaitCountsThreadsQueuedForACPU(t *testing.T) {
	before, err := RunqueueWait(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	spinners := 4 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(spinners + 1))
	const spin = 300 * time.Millisecond
	var wg sync.WaitGroup
	for range spinners {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// Spin on the thread's own CPU time, so that each thread
			// needs spin of CPU whatever the machine's load.
			for start := threadCPU(t); threadCPU(t)-start < spin; {
			}
		})
	}
	wg.Wait()
	after, err := RunqueueWait(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The spinners need spinners*spin of CPU from NumCPU cores, so they
	// take at least spinners*spin/NumCPU, and all but NumCPU of them are
	// queued at any moment of it: (spinners-NumCPU)*spinners*spin/NumCPU
	// in all, four times the bound below. One thread alone waits at most
	// that long less its own spin, under the bound on a quiet machine.
	want := time.Duration(spinners-runtime.NumCPU()) * spin
	if waited := after - before; waited < want {
		t.Fatalf("threads waited %v for a CPU while %d spun for %v each on %d CPUs, want at least %v",
			waited, spinners, spin, runtime.NumCPU(), want)
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Error(err)
		return 1 << 62
	}
	return time.Duration(ts.Nano())
}

func TestCtxSwitchesOfAProcessThatIsGoneIsAnError(t *testing.T) {
	// Above the kernel's pid_max (at most 2^22), so no process has it.
	if n, err := CtxSwitches(1 << 23); err == nil {
		t.Fatalf("a process that does not exist made %d context switches", n)
	}
}

func TestPerProcessTablesHaveARowPerRunAndAColumnPerProcess(t *testing.T) {
	runs := []*Result{
		{Name: "latency", Completed: 1000,
			CPU:          map[string]time.Duration{"frontdoor": 250 * time.Millisecond, "redis": 40 * time.Millisecond},
			CtxSwitches:  map[string]uint64{"frontdoor": 23000, "redis": 4500},
			RunqueueWait: map[string]time.Duration{"frontdoor": 120 * time.Millisecond, "redis": 9 * time.Millisecond}},
		{Name: "throughput", Completed: 20000,
			CPU:          map[string]time.Duration{"frontdoor": 2 * time.Second},
			CtxSwitches:  map[string]uint64{"frontdoor": 26000, "redis": 1000},
			RunqueueWait: map[string]time.Duration{"frontdoor": 1500 * time.Millisecond}},
		{Name: "nothing answered"},
	}
	procs := []string{"frontdoor", "redis"}
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer)
		want  string
	}{
		{"CPU µs per request", func(b *bytes.Buffer) { WriteCPU(b, runs, procs) },
			"| run | frontdoor | redis | total |\n|---|---:|---:|---:|\n" +
				"| latency | 250 | 40 | 290 |\n| throughput | 100 | 0 | 100 |\n| nothing answered | 0 | 0 | 0 |\n"},
		{"context switches per request", func(b *bytes.Buffer) { WriteCtxSwitches(b, runs, procs) },
			"| run | frontdoor | redis | total |\n|---|---:|---:|---:|\n" +
				"| latency | 23.0 | 4.5 | 27.5 |\n| throughput | 1.3 | 0.1 | 1.4 |\n| nothing answered | 0.0 | 0.0 | 0.0 |\n"},
		{"waiting for a CPU, µs per request", func(b *bytes.Buffer) { WriteRunqueueWait(b, runs, procs) },
			"| run | frontdoor | redis | total |\n|---|---:|---:|---:|\n" +
				"| latency | 120 | 9 | 129 |\n| throughput | 75 | 0 | 75 |\n| nothing answered | 0 | 0 | 0 |\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tc.write(&b)
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}
