package chain

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/testkit"
)

// The test binary doubles as a writer process that a test can kill -9:
// with AUDIT_CHILD_REDIS set it appends forever and prints every
// acknowledged Audit-ID.
func TestMain(m *testing.M) {
	if addr := os.Getenv("AUDIT_CHILD_REDIS"); addr != "" {
		os.Exit(childWriter(addr, os.Getenv("AUDIT_CHILD_KEY"), os.Getenv("AUDIT_CHILD_CHAIN")))
	}
	os.Exit(m.Run())
}

func childWriter(addr, keyHex, chainID string) int {
	seed, err := hex.DecodeString(keyHex)
	if err != nil {
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	s, err := New(rdb, attribution.NewSigner(ed25519.NewKeyFromSeed(seed)), nil, Options{})
	if err != nil {
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				a, err := s.Append(context.Background(), attribution.StreamAttribution, chainID, payload(chainID, w*1_000_000+i), nil)
				if err != nil {
					continue
				}
				mu.Lock()
				fmt.Fprintf(out, "ACK %s\n", a.AuditID)
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}

// An auditsvc process is killed with SIGKILL in the middle of appending,
// while this process appends to the same chain: every record the killed
// process acknowledged is stored, and the chain verifies.
func TestKilledWriterProcessLosesNothingAcknowledged(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	key := ed25519.NewKeyFromSeed(seed)
	ks, _ := attribution.NewKeySet(key)
	const chainID = "crash-chain"

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AUDIT_CHILD_REDIS="+srv.Addr, "AUDIT_CHILD_KEY="+hex.EncodeToString(seed), "AUDIT_CHILD_CHAIN="+chainID)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// This process writes to the same chain at the same time.
	local := newStore(t, srv.Client(t), ks, Options{})
	stopLocal := make(chan struct{})
	var localIDs []string
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLocal:
				return
			default:
			}
			a, err := local.Append(ctx, attribution.StreamAttribution, chainID, payload(chainID, i), nil)
			if err != nil {
				t.Error(err)
				return
			}
			localIDs = append(localIDs, a.AuditID)
		}
	})

	var childIDs []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && len(childIDs) < 1500 {
		if id, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
			childIDs = append(childIDs, id)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // acknowledgements already written before the kill
		if id, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
			childIDs = append(childIDs, id)
		}
	}
	_ = cmd.Wait()
	time.Sleep(50 * time.Millisecond) // the local writer keeps going after the kill
	close(stopLocal)
	wg.Wait()
	if len(childIDs) < 1500 || len(localIDs) == 0 {
		t.Fatalf("child acknowledged %d, local %d", len(childIDs), len(localIDs))
	}

	r, err := local.Verify(ctx, attribution.StreamAttribution, chainID, verifyOpts(ks, chainID), 0)
	if err != nil || !r.Valid {
		t.Fatalf("verify after kill -9: %v %+v", err, r)
	}
	for _, id := range append(childIDs, localIDs...) {
		if _, err := local.Get(ctx, id); err != nil {
			t.Fatalf("acknowledged record %s missing: %v", id, err)
		}
	}
	if r.Length < uint64(len(childIDs)+len(localIDs)) {
		t.Fatalf("chain has %d records, fewer than the %d acknowledged", r.Length, len(childIDs)+len(localIDs))
	}
	t.Logf("child acknowledged %d, local %d, chain length %d (unacknowledged but stored: %d)",
		len(childIDs), len(localIDs), r.Length, r.Length-uint64(len(childIDs)+len(localIDs)))
}

// A client library that re-sends a pipeline after a network error runs the
// script twice. The second run must not make Append attest the response a
// second time.
func TestResentScriptIsRecognisedAsOwnAppend(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	ks := testKeys(t)
	rdb := srv.Client(t)
	// Loaded first, so that the doubled pipeline is the one that appends
	// (not one answered NOSCRIPT).
	if err := appendScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	rdb.AddHook(resendHook{once: &once})
	s := newStore(t, rdb, ks, Options{})
	a, err := s.Append(ctx, attribution.StreamAttribution, "resent", payload("resent", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Sequence != 1 {
		t.Fatalf("sequence %d", a.Sequence)
	}
	head, n, err := s.Head(ctx, attribution.StreamAttribution, "resent")
	if err != nil || n != 1 || head != a.AuditID {
		t.Fatalf("chain has %d records (head %s), want exactly the one acknowledged: %v", n, head, err)
	}
}

// resendHook runs the first append pipeline twice and reports the second
// result.
type resendHook struct{ once *sync.Once }

func (resendHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (resendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h resendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		twice := false
		if carriesAppend(cmds) {
			h.once.Do(func() { twice = true })
		}
		if twice {
			_ = next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}
