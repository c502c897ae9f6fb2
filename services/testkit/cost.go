//go:build unix

package testkit

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Cost runs f and returns the CPU time (user and system) and the bytes
// allocated meanwhile by the whole process: what one request cost, for
// tests that bound it by generous ceilings rather than time it.
func Cost(t testing.TB, f func()) (cpu time.Duration, allocated uint64) {
	t.Helper()
	var r0, r1 syscall.Rusage
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r0); err != nil {
		t.Fatal(err)
	}
	f()
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r1); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	cpu = time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	return cpu, m1.TotalAlloc - m0.TotalAlloc
}
