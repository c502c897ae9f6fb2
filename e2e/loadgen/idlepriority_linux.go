package loadgen

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// runAtIdlePriority puts every thread of this process in Linux's
// SCHED_IDLE class, and with them every thread they start later (a new
// thread takes its creator's class): the process then runs only on CPU
// that nothing else on the machine wants. The list of threads is read
// until a pass finds none left to move, since the runtime may start one
// while it is being walked.
func runAtIdlePriority() error {
	moved := map[int]bool{}
	for {
		tids, err := threadIDs()
		if err != nil {
			return err
		}
		more := false
		for _, tid := range tids {
			if moved[tid] {
				continue
			}
			attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
				return fmt.Errorf("thread %d to SCHED_IDLE: %w", tid, err)
			}
			moved[tid], more = true, true
		}
		if !more {
			return nil
		}
	}
}

// threadIDs lists this process's threads.
func threadIDs() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	tids := make([]int, 0, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
