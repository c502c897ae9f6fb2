//go:build race

package rawsock

import (
	"runtime"
	"syscall"
	"unsafe"
)

// The race detector learns that data written to one socket and read
// from another is ordered through the syscall package: syscall.Write
// releases, and a successful syscall.Read acquires, one shared address.
// A direct call skips both, so the detector would report the data passed
// through the suite's own sockets (a handler's state written before its
// response, read by the client after it) as a race. Under the detector a
// zero-length syscall.Write before each write and syscall.Read after each
// read (both return at once on a socket, moving no data) carry the same
// ordering, and the buffers are marked as the syscall package marks them.

func raceBeforeWrite(fd uintptr) { _, _ = syscall.Write(int(fd), nil) }

func raceAfterWrite(p []byte) { runtime.RaceReadRange(unsafe.Pointer(&p[0]), len(p)) }

func raceAfterRead(fd uintptr, p []byte) {
	runtime.RaceWriteRange(unsafe.Pointer(&p[0]), len(p))
	_, _ = syscall.Read(int(fd), nil)
}
