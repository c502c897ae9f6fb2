package transport

import (
	"bufio"
	"crypto/tls"
	"io"
	"runtime/debug"
	"sync"
	"time"
)

// Buffer sizes. Requests are typically well under 2 KiB; larger heads and
// bodies still work (agtp.ReadRequest copies past a full buffer). Buffers
// are pooled and held only while a request is being read or a response
// written, so an idle connection holds none.
const (
	readBufSize  = 4 << 10
	writeBufSize = 4 << 10
)

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
)

func getReader(r io.Reader) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

func getWriter(w io.Writer) *bufio.Writer {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}

// tokenBucket is a minimal rate limiter: rate tokens per second, at most
// burst saved up.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

func (b *tokenBucket) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func stack() string { return string(debug.Stack()) }

// inspectPeer runs Options.InspectPeer on a completed handshake.
func (s *Server) inspectPeer(st *tls.ConnectionState) any {
	if s.opts.InspectPeer == nil || len(st.PeerCertificates) == 0 {
		return nil
	}
	return s.opts.InspectPeer(st)
}
