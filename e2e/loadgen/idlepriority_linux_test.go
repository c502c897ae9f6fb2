package loadgen

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agtpsuite/agtp/services/testkit"
)

// idleChildEnv makes the test binary, run again, act as
// TestIdlePriorityCoversLaterThreads's child.
const idleChildEnv = "AGTP_LOADGEN_IDLE_CHILD"

// TestIdlePriorityCoversLaterThreads runs runAtIdlePriority in a child
// process (the test process itself should keep its priority), which then
// starts a thread of its own and reports every thread's scheduling class:
// all of them, the later thread too, are SCHED_IDLE.
func TestIdlePriorityCoversLaterThreads(t *testing.T) {
	if os.Getenv(idleChildEnv) == "1" {
		idlePriorityChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdlePriorityCoversLaterThreads$")
	cmd.Env = append(os.Environ(), idleChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var threads, idle, later int
	for _, line := range strings.Split(string(out), "\n") {
		var tid, policy int
		var when string
		if n, _ := fmt.Sscanf(line, "thread %d policy %d %s", &tid, &policy, &when); n != 3 {
			continue
		}
		threads++
		if policy == unix.SCHED_IDLE {
			idle++
		}
		if when == "later" {
			later++
		}
	}
	if threads < 2 || idle != threads || later == 0 {
		t.Errorf("%d threads, %d of them SCHED_IDLE, %d started after the call; want every one, and at least one later:\n%s", threads, idle, later, out)
	}
}

// idlePriorityChild is the child's side: it moves its threads, makes the
// runtime start more by holding several locked threads in blocking
// system calls at once, and prints each thread's class.
func idlePriorityChild(t *testing.T) {
	before := threads(t)
	if err := runAtIdlePriority(); err != nil {
		t.Fatal(err)
	}
	const held = 4 // more than the threads a fresh process has spare
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var locked atomic.Int32
	for range held {
		wg.Go(func() {
			runtime.LockOSThread()
			locked.Add(1)
			buf := make([]byte, 1)
			_, _ = unix.Read(p[0], buf) // in the kernel until the pipe is written
		})
	}
	testkit.WaitFor(t, 5*time.Second, "threads started after the call", func() bool {
		return locked.Load() == held && len(threads(t)) > len(before)
	})
	for tid := range threads(t) {
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue
		}
		when := "later"
		if before[tid] {
			when = "before"
		}
		fmt.Printf("thread %d policy %d %s\n", tid, attr.Policy, when)
	}
	_, _ = unix.Write(p[1], make([]byte, held))
	wg.Wait()
}

// threads is threadIDs as a set.
func threads(t *testing.T) map[int]bool {
	tids, err := threadIDs()
	if err != nil {
		t.Fatal(err)
	}
	set := make(map[int]bool, len(tids))
	for _, tid := range tids {
		set[tid] = true
	}
	return set
}
