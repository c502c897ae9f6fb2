package client

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// RetryPolicy makes Do answer a 429 or 503 by waiting and sending the
// request again, for requests that are safe to repeat (Idempotent). The
// zero value never retries, as curl does not without --retry: an
// unexpected wait is worse than an honest 429 for most callers.
type RetryPolicy struct {
	// MaxRetries is how many times a request is sent again; 0 disables.
	MaxRetries int
	// BaseDelay is the first wait when the answer names none; each
	// further wait doubles it. Default 200 ms.
	BaseDelay time.Duration
	// MaxDelay caps one wait, including a Retry-After the server asked
	// for: a server asking for longer is answered by giving up, with its
	// response. Default 30 s.
	MaxDelay time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.BaseDelay <= 0 {
		p.BaseDelay = 200 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	return p
}

// retryable reports whether resp is an answer worth waiting out.
func retryable(resp *agtp.Response) bool {
	return resp.Status == agtp.StatusRateLimited || resp.Status == agtp.StatusUnavailable
}

// delay is how long to wait before attempt n (0-based) after resp, and
// false when the server asked for longer than MaxDelay. A Retry-After
// field (seconds or an HTTP date) wins, then the error body's
// retry_after_seconds member; otherwise exponential backoff. Jitter
// spreads the retries of many clients refused in the same instant: up
// to a quarter more than the server asked, or "full jitter" (AWS
// architecture blog, "Exponential Backoff And Jitter") for backoff.
func (p RetryPolicy) delay(resp *agtp.Response, n int, now time.Time) (time.Duration, bool) {
	if asked, ok := retryAfter(resp, now); ok {
		if asked > p.MaxDelay {
			return 0, false
		}
		return asked + rand.N(asked/4+time.Millisecond), true
	}
	backoff := p.BaseDelay << min(n, 16)
	if backoff <= 0 || backoff > p.MaxDelay {
		backoff = p.MaxDelay
	}
	return rand.N(backoff) + time.Millisecond, true
}

// RetryAfter reads how long resp asks the caller to wait: the
// Retry-After field in seconds or as an HTTP date, else the error body's
// retry_after_seconds member (docs/decisions.md#D-error-body).
func RetryAfter(resp *agtp.Response) (time.Duration, bool) {
	return retryAfter(resp, time.Now())
}

func retryAfter(resp *agtp.Response, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(resp.Header.Get("Retry-After")); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
			return time.Duration(min(s, 1<<20)) * time.Second, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(now), 0), true
		}
	}
	if len(resp.Body) > 0 && len(resp.Body) <= 64<<10 {
		var b struct {
			RetryAfterSeconds *int64 `json:"retry_after_seconds"`
		}
		if json.Unmarshal(resp.Body, &b) == nil && b.RetryAfterSeconds != nil && *b.RetryAfterSeconds >= 0 {
			return time.Duration(min(*b.RetryAfterSeconds, 1<<20)) * time.Second, true
		}
	}
	return 0, false
}

// waitRetry sleeps before the next attempt, or returns ctx's error.
func waitRetry(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
