package suite

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/keyfile"
)

// TestConsoleKeepsSessionsInTheSuiteRedisAndReadsEveryServiceMetrics pins
// how make run configures the operator console: its one-time link signs
// in once, the session is kept in the suite's Redis (so a restarted
// console keeps it), and the health page reads the metrics of all six
// services (the rates need two scrapes, so the page may still say it is
// waiting; it must not say a service has no metrics address).
func TestConsoleKeepsSessionsInTheSuiteRedisAndReadsEveryServiceMetrics(t *testing.T) {
	s := startTestSuite(t, Config{})
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		t.Fatal(err)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}}}
	defer b.CloseIdleConnections()
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := b.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	link, err := s.Console().SignInLink(LocalOperator)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(link); code != http.StatusOK {
		t.Fatalf("the one-time link = %d", code)
	}
	if code, _ := get(link); code != http.StatusUnauthorized {
		t.Fatalf("the one-time link again = %d, want 401", code)
	}
	opts, err := redis.ParseURL(s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "agtp:{console}:session:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("console sessions in the suite's Redis: %v, %v; want one", keys, err)
	}
	code, page := get(s.Console().URL() + "/health")
	if code != http.StatusOK || strings.Count(page, `<tr id="health-`) != 6 || strings.Contains(page, "no metrics address") {
		t.Fatalf("health page = %d:\n%s", code, page)
	}
}
