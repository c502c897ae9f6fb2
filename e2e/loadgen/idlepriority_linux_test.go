package loadgen

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
		idlePriorityChild()
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
func idlePriorityChild() {
	before := threadIDs()
	if err := runAtIdlePriority(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	const held = 4 // more than the threads a fresh process has spare
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
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
	waitUntil(func() bool { return locked.Load() == held && len(threadIDs()) > len(before) })
	for tid := range threadIDs() {
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

// waitUntil polls cond for up to five seconds.
func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

func threadIDs() map[int]bool {
	ids := map[int]bool{}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			ids[tid] = true
		}
	}
	return ids
}
