package e2e

import (
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
)

// StartCluster is Start for programs that are not tests, such as the load
// benchmark (e2e/cmd/agtpbench). It returns the running cluster and a stop
// function that kills its processes and removes their temporary files; on
// error nothing is left running.
func StartCluster(opts Options) (c *Cluster, stop func(), err error) {
	tb := &programTB{log: log.New(os.Stderr, "e2e: ", 0)}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			tb.cleanup()
			if !ok {
				panic(r)
			}
			c, stop, err = nil, nil, f.err
		}
	}()
	c = Start(tb, opts)
	return c, tb.cleanup, nil
}

// Pid is the process id of the service's current process, 0 when it is
// not running.
func (p *Proc) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// fatal carries a Fatal call out of Start, which StartCluster recovers.
type fatal struct{ err error }

// programTB runs the harness outside a test: Fatal unwinds to
// StartCluster (a test's Fatal would end the test's goroutine instead),
// Cleanup functions run when the program calls stop, and logs go to
// stderr. testing.TB has an unexported method, so the interface is
// embedded; it is nil, and the harness uses only the methods defined
// here.
type programTB struct {
	testing.TB
	log *log.Logger

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	tempDirs []string
}

func (t *programTB) Helper()                         {}
func (t *programTB) Name() string                    { return "agtpbench" }
func (t *programTB) Log(args ...any)                 { t.log.Print(args...) }
func (t *programTB) Logf(format string, args ...any) { t.log.Printf(format, args...) }

func (t *programTB) Error(args ...any) { t.Log(args...); t.Fail() }

func (t *programTB) Errorf(format string, args ...any) { t.Logf(format, args...); t.Fail() }

func (t *programTB) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

func (t *programTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *programTB) FailNow() {
	t.Fail()
	panic(fatal{errors.New("the cluster failed to start")})
}

func (t *programTB) Fatal(args ...any) {
	t.Fail()
	panic(fatal{errors.New(fmt.Sprint(args...))})
}

func (t *programTB) Fatalf(format string, args ...any) {
	t.Fail()
	panic(fatal{fmt.Errorf(format, args...)})
}

func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *programTB) TempDir() string {
	dir, err := os.MkdirTemp("", "agtpbench-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tempDirs = append(t.tempDirs, dir)
	return dir
}

// cleanup runs the Cleanup functions last-registered first, as testing
// does, then removes the temporary directories. It is idempotent.
func (t *programTB) cleanup() {
	t.mu.Lock()
	fs, dirs := t.cleanups, t.tempDirs
	t.cleanups, t.tempDirs = nil, nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
