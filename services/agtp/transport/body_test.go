package transport

import (
	"bufio"
	"context"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

var announceConns = flag.Int("transport.announceconns", 1000, "connections announcing a body by TestAnnouncedBodiesHoldNoMemory")

// announcedBodyBound is the most the server may hold per connection that
// announced a 1 MiB body and sent none of it: its TLS state, goroutine,
// read buffer and parsed head, but no body buffer. docs/frontdoor-transport.md
// states it.
const announcedBodyBound = 64 << 10

// Connections that announce a 1 MiB body and send nothing cost the server
// no body memory: each holds an in-flight slot and waits for bytes, and its
// buffer is only allocated as they arrive. The clients run in a child
// process so that only the server's memory is measured.
func TestAnnouncedBodiesHoldNoMemory(t *testing.T) {
	n := *announceConns
	// All clients come from one address; the per-address limit is not
	// what is measured.
	ts := startServer(t, Options{DisableQUIC: true, MaxConnsPerIP: -1, MaxInFlight: n}, echo())
	before := serverMemory()
	holdClients(t, ts, n, strconv.Itoa(agtp.DefaultMaxBody))
	// Every request is past its head and waiting for its body, holding a
	// slot.
	// A thousand heads take a while to be read under the race detector on
	// a busy machine; the wait bounds the test, not the server.
	testkit.WaitFor(t, time.Minute, "every request reading its body", func() bool {
		st := ts.Stats()
		return st.OpenTCP == int64(n) && st.InFlight == n
	})
	time.Sleep(50 * time.Millisecond) // let the last goroutines park
	after := serverMemory()
	perConn := (after - before) / uint64(n)
	t.Logf("%d connections announcing %d-byte bodies: %.1f MiB, %.1f KiB per connection (heap in use + stacks)",
		n, agtp.DefaultMaxBody, float64(after-before)/(1<<20), float64(perConn)/1024)
	if st := ts.Stats(); st.BodyBytes != 0 {
		t.Errorf("bodies hold %d bytes of budget before any body byte arrived", st.BodyBytes)
	}
	if perConn > announcedBodyBound {
		t.Fatalf("%d bytes per connection announcing a body, bound %d", perConn, announcedBodyBound)
	}
}

// bodyExchange is one request on its own TCP connection or QUIC stream,
// written piece by piece.
type bodyExchange struct {
	write func(t testing.TB, b []byte)
	read  func(t testing.TB) *agtp.Response
	// ended asserts that the server ended the connection (TCP) or the
	// stream (QUIC) after its response.
	ended func(t testing.TB)
}

func newBodyExchange(t testing.TB, ts *testServer, overQUIC bool) bodyExchange {
	t.Helper()
	if !overQUIC {
		conn := ts.dial(t, nil)
		c := newClient(conn)
		return bodyExchange{
			write: func(t testing.TB, b []byte) {
				if _, err := conn.Write(b); err != nil {
					t.Fatal(err)
				}
			},
			read:  c.recv,
			ended: func(t testing.TB) { expectClosed(t, conn, c.br, 3*time.Second) },
		}
	}
	qc := ts.quicDial(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(str)
	return bodyExchange{
		write: func(t testing.TB, b []byte) {
			if _, err := str.Write(b); err != nil {
				t.Fatal(err)
			}
		},
		read: func(t testing.TB) *agtp.Response {
			str.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := agtp.ReadResponse(br, agtp.Limits{})
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			return resp
		},
		ended: func(t testing.TB) {
			str.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("stream after the response: %v, want its end", err)
			}
		},
	}
}

func uploadHead(n int, hdr ...string) []byte {
	var b strings.Builder
	b.WriteString("AGTP/1.0 EXECUTE /upload\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(n) + "\r\n")
	for i := 0; i+1 < len(hdr); i += 2 {
		b.WriteString(hdr[i] + ": " + hdr[i+1] + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// Bodies share Options.BodyBudget: a request whose body finds it held by
// others waits BusyWait, then gets 503 body-budget-exhausted with
// Retry-After and its connection (stream) ended; once the budget is back,
// bodies are read again.
func TestBodyBudgetExhaustedAnswers503(t *testing.T) {
	const budget = 64 << 10
	for _, tt := range []struct {
		name     string
		overQUIC bool
	}{{"tcp", false}, {"quic", true}} {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, Options{DisableQUIC: !tt.overQUIC, BodyBudget: budget, Limits: agtp.Limits{MaxBody: budget},
				BusyWait: 50 * time.Millisecond}, echo())

			// The holder sends part of a body the size of the budget, enough
			// for its buffer to have grown to all of it.
			holder := newBodyExchange(t, ts, tt.overQUIC)
			holder.write(t, uploadHead(budget))
			holder.write(t, make([]byte, 40<<10))
			waitFor(t, "the holder's body holds the budget", func() bool { return ts.Stats().BodyBytes == budget })

			refused := newBodyExchange(t, ts, tt.overQUIC)
			refused.write(t, append(uploadHead(100, agtp.HeaderTaskID, "t-7"), make([]byte, 100)...))
			resp := refused.read(t)
			if eb := errorBody(t, resp); resp.Status != agtp.StatusUnavailable || eb.Reason != ReasonBodyBudgetExhausted || eb.TaskID != "t-7" {
				t.Fatalf("got %d %+v", resp.Status, eb)
			}
			if ra := resp.Header.Get("Retry-After"); ra != "1" {
				t.Errorf("Retry-After = %q", ra)
			}
			refused.ended(t)
			if st := ts.Stats(); st.BodyBudget != 1 || st.BodyBytes != budget {
				t.Errorf("after the refusal: BodyBudget %d, BodyBytes %d", st.BodyBudget, st.BodyBytes)
			}

			holder.write(t, make([]byte, budget-40<<10))
			if resp := holder.read(t); resp.Status != 200 {
				t.Fatalf("holder: %d %s", resp.Status, resp.Body)
			}
			waitFor(t, "the budget given back", func() bool { return ts.Stats().BodyBytes == 0 })
			again := newBodyExchange(t, ts, tt.overQUIC)
			again.write(t, append(uploadHead(100), make([]byte, 100)...))
			if resp := again.read(t); resp.Status != 200 {
				t.Fatalf("after the budget came back: %d %s", resp.Status, resp.Body)
			}
		})
	}
}

// A body is read only once its request has an in-flight slot: with
// MaxInFlight taken, a request that has sent only its head is already
// answered 503 server-busy. On TCP its body is then read past, not kept,
// and the connection serves the next request.
func TestBodyWaitsForInFlightSlot(t *testing.T) {
	for _, tt := range []struct {
		name     string
		overQUIC bool
	}{{"tcp", false}, {"quic", true}} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			ts := startServer(t, Options{DisableQUIC: !tt.overQUIC, MaxInFlight: 1, BusyWait: 50 * time.Millisecond},
				HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
					if req.Path == "/slow" {
						g.entered <- struct{}{}
						<-g.release
					}
					return echo()(ctx, ci, req)
				}))
			defer g.open()
			slow := newBodyExchange(t, ts, tt.overQUIC)
			slow.write(t, rawRequest(t, "QUERY", "/slow"))
			<-g.entered

			busy := newBodyExchange(t, ts, tt.overQUIC)
			busy.write(t, uploadHead(10, agtp.HeaderTaskID, "t-8"))
			waitFor(t, "503 decided before any body byte", func() bool { return ts.Stats().Busy == 1 })
			if st := ts.Stats(); st.BodyBytes != 0 || st.InFlight != 1 {
				t.Errorf("while busy: BodyBytes %d, InFlight %d", st.BodyBytes, st.InFlight)
			}
			if !tt.overQUIC {
				busy.write(t, []byte("0123456789"))
			}
			resp := busy.read(t)
			if eb := errorBody(t, resp); resp.Status != agtp.StatusUnavailable || eb.Reason != ReasonServerBusy || eb.TaskID != "t-8" {
				t.Fatalf("got %d %+v", resp.Status, eb)
			}
			g.open()
			if resp := slow.read(t); resp.Status != 200 {
				t.Fatalf("slow request: %d", resp.Status)
			}
			if tt.overQUIC {
				busy.ended(t)
				return
			}
			busy.write(t, append(uploadHead(3), "abc"...))
			if resp := busy.read(t); resp.Status != 200 || string(resp.Body) != strconv.Quote("EXECUTE /upload") {
				t.Fatalf("next request on the connection: %d %s", resp.Status, resp.Body)
			}
		})
	}
}

// A per-endpoint body limit above the whole budget is lowered to it: such
// a body could never be held, so it is refused as too large (400), not
// with a 503 worth retrying.
func TestBodyLimitAboveBudgetIsTooLarge(t *testing.T) {
	const budget = 2 << 20
	ts := startServer(t, Options{DisableQUIC: true, BodyBudget: budget,
		Limits: agtp.Limits{BodyLimit: func(string, string) int64 { return 8 << 20 }}}, echo())
	tests := []struct {
		name   string
		n      int
		status int
	}{
		{"at the budget", budget, 200},
		{"over the budget", budget + 1, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := ts.dial(t, nil)
			c := newClient(conn)
			// The server may close before it has read everything.
			go conn.Write(append(uploadHead(tt.n), make([]byte, tt.n)...))
			resp := c.recv(t)
			if resp.Status != tt.status {
				t.Fatalf("status %d %s", resp.Status, resp.Body)
			}
			if tt.status == 400 {
				if eb := errorBody(t, resp); eb.Reason != agtp.ReasonBodyTooLarge {
					t.Fatalf("reason %q", eb.Reason)
				}
				expectClosed(t, conn, c.br, 3*time.Second)
			}
		})
	}
}
