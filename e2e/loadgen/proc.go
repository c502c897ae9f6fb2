package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports (the kernel exports
// it as a constant to user space), and reading it through sysconf would
// need cgo.
const clockTicks = 100

// CPUTime returns the user plus system CPU time a process has used so
// far, all threads included (fields 14 and 15 of /proc/<pid>/stat).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain
	// spaces, so count fields from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so utime (14) and stime (15) are f[11], f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * time.Second / clockTicks, nil
}

// CtxSwitches returns the context switches a process's threads have made
// so far, voluntary (the thread blocked: a read with nothing to read, a
// futex wait) and involuntary (it was preempted), summed over
// /proc/<pid>/task/*/status. /proc/<pid>/status alone would count the
// main thread only. A thread that has exited takes its count with it, so
// the sum can fall short; Go processes rarely end threads (the runtime
// parks idle ones rather than exiting them; only a goroutine that ends
// while locked to its thread takes the thread along), so over a measured
// window the difference is the switches made in it. A thread that ends
// between listing and reading is skipped, not an error.
func CtxSwitches(pid int) (uint64, error) {
	return sumThreads(pid, "status", parseCtxSwitches)
}

// RunqueueWait returns how long a process's threads have been runnable
// but waiting for a CPU so far (the second field of
// /proc/<pid>/task/*/schedstat), with CtxSwitches' caveat about threads
// that end. Each wake-up of a thread waits there until a core takes it,
// so across processes this is the time requests spent queued for the
// machine's cores rather than for each other.
func RunqueueWait(pid int) (time.Duration, error) {
	ns, err := sumThreads(pid, "schedstat", parseRunqueueWait)
	return time.Duration(ns), err
}

// sumThreads sums parse over the named file of every thread of pid. A
// thread that ends between listing and reading is skipped, not an error.
func sumThreads(pid int, file string, parse func(string) (uint64, error)) (uint64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/" + file)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // the thread ended
		}
		if err != nil {
			return 0, err
		}
		n, err := parse(string(b))
		if err != nil {
			return 0, fmt.Errorf("%s/%s/%s: %w", dir, t.Name(), file, err)
		}
		sum += n
	}
	return sum, nil
}

// parseRunqueueWait returns the nanoseconds waited on a run queue from
// the text of a schedstat file: "<on CPU ns> <waiting ns> <timeslices>".
func parseRunqueueWait(schedstat string) (uint64, error) {
	f := strings.Fields(schedstat)
	if len(f) < 3 {
		return 0, fmt.Errorf("schedstat %q: want three fields", schedstat)
	}
	return strconv.ParseUint(f[1], 10, 64)
}

// parseCtxSwitches returns voluntary_ctxt_switches plus
// nonvoluntary_ctxt_switches from the text of a /proc status file.
func parseCtxSwitches(status string) (uint64, error) {
	var sum uint64
	for _, k := range []string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
		v, ok := statusValue(status, k)
		if !ok {
			return 0, fmt.Errorf("no %s", k)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", k, err)
		}
		sum += n
	}
	return sum, nil
}

// RSS returns a process's resident set size (VmRSS in
// /proc/<pid>/status), in bytes.
func RSS(pid int) (int64, error) {
	v, err := statusField(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("VmRSS %q: %w", v, err)
	}
	return kb << 10, nil
}

func statusField(pid int, name string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	if v, ok := statusValue(string(b), name); ok {
		return v, nil
	}
	return "", fmt.Errorf("/proc/%d/status has no %s", pid, name)
}

// statusValue returns the value of the line "name:" of a /proc status
// file's text, without the blanks around it.
func statusValue(status, name string) (string, bool) {
	for line := range strings.SplitSeq(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// OpenFileLimit returns a process's soft limit on open files, from
// /proc/<pid>/limits.
func OpenFileLimit(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			return strconv.ParseUint(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/limits has no open-files line", pid)
}

// RaiseFileLimit raises this process's RLIMIT_NOFILE to at least want
// when it can: first the soft limit up to the hard limit, then both
// (which needs CAP_SYS_RESOURCE). Child processes started afterwards
// inherit the result, which is how the suite's processes get enough file
// descriptors for the idle-connection test. It returns the soft limit in
// force.
func RaiseFileLimit(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	if lim.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			return want, nil
		}
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}

// LoadAvg returns the 1, 5 and 15 minute load averages.
func LoadAvg() ([3]float64, error) {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return l, fmt.Errorf("/proc/loadavg: %q", b)
	}
	for i := range l {
		if l[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return l, err
		}
	}
	return l, nil
}

// CPUSample is the machine-wide CPU time from /proc/stat.
type CPUSample struct {
	Busy, Total uint64 // in clock ticks
}

// MachineCPU reads the aggregate "cpu" line of /proc/stat.
func MachineCPU() (CPUSample, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUSample{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUSample{}, fmt.Errorf("/proc/stat: %q", line)
	}
	var s CPUSample
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return CPUSample{}, err
		}
		// Fields 8 and 9 (guest, guest_nice) are already in user and nice.
		if i >= 8 {
			break
		}
		s.Total += n
		if i != 3 && i != 4 { // idle, iowait
			s.Busy += n
		}
	}
	return s, nil
}

// Utilisation is the share of all cores that was busy between a and b,
// in [0, 1].
func Utilisation(a, b CPUSample) float64 {
	if b.Total <= a.Total {
		return 0
	}
	return float64(b.Busy-a.Busy) / float64(b.Total-a.Total)
}

// Machine describes the host a benchmark ran on.
type Machine struct {
	CPUs      int
	CPUModel  string
	MemTotal  int64 // bytes
	GoVersion string
	Kernel    string
}

// DescribeMachine reads the host's details from /proc.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemTotal = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
