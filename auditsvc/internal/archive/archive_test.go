package archive

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	"github.com/agtpsuite/agtp/services/testkit"
)

func entry(i int) attribution.Entry {
	return attribution.Entry{Format: "jws", Stream: attribution.StreamAttribution, Chain: "a", Sequence: uint64(i + 1),
		AuditID: strings.Repeat("0", 64), JWS: "h.p." + strings.Repeat("s", 40), StoredAt: time.Unix(int64(i), 0).UTC()}
}

func readAll(t *testing.T, dir string) (files []string, entries []attribution.Entry) {
	t.Helper()
	files, _ = filepath.Glob(filepath.Join(dir, "*.jsonl"))
	slices.Sort(files)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := attribution.ReadEntries(fh, func(e attribution.Entry) error { entries = append(entries, e); return nil }); err != nil {
			t.Fatal(err)
		}
		fh.Close()
	}
	return files, entries
}

func run(t *testing.T, s *Sink) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestArchiveRotatesBySizeAndKeepsOrder(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Options{Dir: dir, Instance: "i1", MaxFileBytes: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, s)
	for i := range 40 {
		s.Offer(entry(i))
	}
	stop()
	files, got := readAll(t, dir)
	if len(files) < 4 {
		t.Fatalf("%d files, want rotation by size", len(files))
	}
	for _, f := range files {
		if fi, _ := os.Stat(f); fi.Size() > 1000 {
			t.Fatalf("%s is %d bytes, limit 1000", f, fi.Size())
		}
	}
	if len(got) != 40 {
		t.Fatalf("read %d entries, want 40", len(got))
	}
	for i, e := range got {
		if e.Sequence != uint64(i+1) {
			t.Fatalf("entry %d has sequence %d", i, e.Sequence)
		}
	}
	if st := s.Stats(); st.Written != 40 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestArchiveRotatesByAge(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := New(Options{Dir: dir, Instance: "i1", MaxFileAge: time.Minute, SyncInterval: 5 * time.Millisecond, Now: clock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, s)
	s.Offer(entry(0))
	waitWritten(t, s, 1)
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	time.Sleep(50 * time.Millisecond) // several sync ticks: the old file is closed
	s.Offer(entry(1))
	stop()
	files, got := readAll(t, dir)
	if len(files) != 2 || len(got) != 2 {
		t.Fatalf("files %v entries %d, want 2 and 2", files, len(got))
	}
	if !strings.Contains(files[1], "20260101T000200Z") {
		t.Fatalf("second file %s is not named after its opening time", files[1])
	}
}

func waitWritten(t *testing.T, s *Sink, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Written < n {
		if time.Now().After(deadline) {
			t.Fatalf("written %d, want %d", s.Stats().Written, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestArchiveFullQueueDropsCountsAndLogs(t *testing.T) {
	dir := t.TempDir()
	var logBuf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logBuf.Write(p) }), nil))
	s, err := New(Options{Dir: dir, Queue: 4}, log)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // nothing drains yet: the queue holds 4
		s.Offer(entry(i))
	}
	if st := s.Stats(); st.Dropped != 6 || st.Queued != 4 {
		t.Fatalf("stats %+v, want 6 dropped and 4 queued", st)
	}
	stop := run(t, s)
	stop()
	_, got := readAll(t, dir)
	if len(got) != 4 {
		t.Fatalf("archived %d, want the 4 queued", len(got))
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logBuf.String(), "dropped_total=6") || !strings.Contains(logBuf.String(), "last_sequence=10") {
		t.Fatalf("drops not logged with their position: %s", logBuf.String())
	}
}

// Once Run has returned nothing reads the queue: an entry offered then
// is counted as dropped and logged with its position, not left queued.
func TestArchiveOfferAfterRunStoppedDropsCountsAndLogs(t *testing.T) {
	dir := t.TempDir()
	var logBuf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logBuf.Write(p) }), nil))
	s, err := New(Options{Dir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, s)
	s.Offer(entry(0))
	stop()
	s.Offer(entry(1))
	if st := s.Stats(); st.Written != 1 || st.Dropped != 1 || st.Queued != 0 {
		t.Fatalf("stats %+v, want 1 written, 1 dropped, none queued", st)
	}
	if _, got := readAll(t, dir); len(got) != 1 {
		t.Fatalf("archived %d, want the one offered while running", len(got))
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logBuf.String(), "archive sink stopped") || !strings.Contains(logBuf.String(), "sequence=2") {
		t.Fatalf("the drop after stop is not logged with its position: %s", logBuf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestArchiveOptionsValidate(t *testing.T) {
	for name, o := range map[string]Options{
		"negative-size":     {Dir: "x", MaxFileBytes: -1},
		"instance-has-path": {Dir: "x", Instance: "../etc"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(Options{}, nil); err == nil {
		t.Error("a sink without a directory was created")
	}
}

// The archive of a real chain verifies on its own, from files alone.
func TestArchivedChainVerifiesFromFiles(t *testing.T) {
	srv := testkit.StartRedis(t)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	ks, _ := attribution.NewKeySet(key)
	dir := t.TempDir()
	sink, err := New(Options{Dir: dir, MaxFileBytes: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, sink)
	store, err := chain.New(srv.Client(t), ks.Signer(), nil, chain.Options{OnAppend: sink.Offer})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				agent := fmt.Sprint("agent-", w%2)
				p := attribution.Payload{AgentID: agent, Method: "QUERY", Status: 200, ResponseID: fmt.Sprint(w, "-", i)}
				if _, err := store.Append(context.Background(), attribution.StreamAttribution, agent, p, nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	stop()
	_, got := readAll(t, dir)
	res := attribution.VerifyEntries(got, attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: ks}}, true)
	if len(res) != 2 {
		t.Fatalf("chains in archive: %d", len(res))
	}
	for k, r := range res {
		if !r.Valid || r.Checked != 50 {
			t.Fatalf("%v: %+v", k, r)
		}
	}
}
