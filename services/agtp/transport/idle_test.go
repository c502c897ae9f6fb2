package transport

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

var idleConns = flag.Int("transport.idleconns", 2000, "idle TLS connections held by TestIdleConnectionMemory")

// Environment of the client child process of TestIdleConnectionMemory.
const (
	idleClientEnv   = "AGTP_TRANSPORT_IDLE_CLIENT_ADDR"
	idleClientNEnv  = "AGTP_TRANSPORT_IDLE_CLIENT_N"
	idleClientCAEnv = "AGTP_TRANSPORT_IDLE_CLIENT_CA"
	// idleClientAnnounceEnv, when set to n, makes each client send a
	// request head announcing an n-byte body, then nothing more.
	idleClientAnnounceEnv = "AGTP_TRANSPORT_IDLE_CLIENT_ANNOUNCE"
)

// Per-connection memory of an idle TLS connection (one request served,
// then idle) must stay under 1 GiB / 10,000. The clients run in a child
// process so that only the server's memory is measured.
func TestIdleConnectionMemory(t *testing.T) {
	// All clients come from one address; the per-address limit is not
	// what is measured.
	ts := startServer(t, Options{DisableQUIC: true, MaxConnsPerIP: -1}, echo())
	n := *idleConns
	before := serverMemory()
	holdClients(t, ts, n, "")
	// Thousands of handshakes take a while on a busy machine; the wait
	// bounds the test, not the server.
	testkit.WaitFor(t, time.Minute, "connections idle", func() bool {
		st := ts.Stats()
		return st.OpenTCP == int64(n) && st.RequestsTCP == uint64(n) && st.InFlight == 0
	})
	time.Sleep(50 * time.Millisecond) // let the last goroutines park
	after := serverMemory()
	perConn := (after - before) / uint64(n)
	t.Logf("%d idle TLS connections: %.1f MiB, %.1f KiB per connection (heap in use + stacks; 10,000 would take %.0f MiB)",
		n, float64(after-before)/(1<<20), float64(perConn)/1024, float64(perConn)*10000/(1<<20))
	if limit := uint64(1<<30) / 10000; perConn > limit {
		t.Fatalf("%d bytes per idle connection, budget %d", perConn, limit)
	}
}

// holdClients starts a child process that opens n connections to ts and
// holds them until the test ends; announce is idleClientAnnounceEnv's
// value. It returns once every connection has sent its request.
func holdClients(t *testing.T, ts *testServer, n int, announce string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		idleClientEnv+"="+ts.TCPAddr().String(),
		idleClientNEnv+"="+strconv.Itoa(n),
		idleClientCAEnv+"="+ts.certs.caFile,
		idleClientAnnounceEnv+"="+announce)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
		waitFor(t, "client connections closed", func() bool { return ts.Stats().OpenTCP == 0 })
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("client process: %q %v", line, err)
	}
}

// serverMemory is the process's live Go memory after a full collection:
// heap in use plus goroutine stacks.
func serverMemory() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// runIdleClients is the child process: it opens N connections, makes one
// request on each (or only announces a body, see idleClientAnnounceEnv),
// reports "ready" and holds them until stdin closes.
func runIdleClients() int {
	addr := os.Getenv(idleClientEnv)
	n, _ := strconv.Atoi(os.Getenv(idleClientNEnv))
	pem, err := os.ReadFile(os.Getenv(idleClientCAEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conf := agtp.ClientTLSConfig("localhost", pool)
	conf.ClientSessionCache = tls.NewLRUClientSessionCache(1) // resumption keeps the setup fast
	conns := make([]*tls.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 32)
	raw := []byte("AGTP/1.0 QUERY /idle\r\nContent-Length: 0\r\n\r\n")
	announce := os.Getenv(idleClientAnnounceEnv)
	if announce != "" {
		raw = []byte("AGTP/1.0 EXECUTE /upload\r\nContent-Type: application/octet-stream\r\nContent-Length: " + announce + "\r\n\r\n")
	}
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := tls.Dial("tcp", addr, conf)
			if err == nil {
				_, err = c.Write(raw)
			}
			if err == nil && announce == "" {
				_, err = agtp.ReadResponse(bufio.NewReader(c), agtp.Limits{})
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "idle client:", firstErr)
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	return 0
}
