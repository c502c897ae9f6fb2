package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/rediskeys"
)

// cookieName carries the session. The __Host- prefix makes the browser
// insist on Secure, Path=/ and no Domain, so no other host can set it.
const cookieName = "__Host-agtp-console"

// Bounds on what the console keeps in memory: a flood of sign-ins or
// one-time links cannot grow it without limit.
const (
	maxSessions = 10000
	maxLinks    = 1000
	// linkTTL is how long an unused one-time sign-in link stays valid.
	linkTTL = 15 * time.Minute
)

// session is one signed-in person.
type session struct {
	id     string
	person string
	// csrf is the token every change must carry (bound to the sign-in:
	// a token of another or an ended sign-in is refused).
	csrf    string
	created time.Time
	seen    time.Time
}

// sessions keeps the console's sessions and one-time links: in Redis
// when the console has one (rdb), so that they survive a restart and
// every replica of the console knows them; else in this process's memory,
// where a restart signs everyone out. In Redis a session is named by the
// SHA-256 of its ID and expires at the absolute timeout; the idle timeout
// is checked on every use, which also records the use.
type sessions struct {
	mu    sync.Mutex
	byID  map[string]*session
	links map[string]link
	idle  time.Duration
	max   time.Duration
	now   func() time.Time
	rdb   redis.UniversalClient
	log   *slog.Logger
}

// link is a one-time sign-in link.
type link struct {
	person  string
	expires time.Time
}

func newSessions(idle, absolute time.Duration, now func() time.Time) *sessions {
	return &sessions{byID: map[string]*session{}, links: map[string]link{}, idle: idle, max: absolute, now: now}
}

// randomToken is 256 bits from the system's CSPRNG, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashOf names a session or link in Redis.
func hashOf(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// start opens a session for person.
func (s *sessions) start(ctx context.Context, person string) (*session, error) {
	if s.rdb != nil {
		now := s.now()
		se := &session{id: randomToken(), person: person, csrf: randomToken(), created: now, seen: now}
		key := rediskeys.ConsoleSession(hashOf(se.id))
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, "person", se.person, "csrf", se.csrf, "created", now.UnixMilli(), "seen", now.UnixMilli())
			p.PExpire(ctx, key, s.max)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("console session store: %w", err)
		}
		return se, nil
	}
	return s.startLocal(person), nil
}

func (s *sessions) startLocal(person string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	if len(s.byID) >= maxSessions {
		// Full even after the sweep: the oldest session ends, not the new one.
		var oldest *session
		for _, x := range s.byID {
			if oldest == nil || x.created.Before(oldest.created) {
				oldest = x
			}
		}
		delete(s.byID, oldest.id)
	}
	se := &session{id: randomToken(), person: person, csrf: randomToken(), created: now, seen: now}
	s.byID[se.id] = se
	return se
}

// get returns the live session of id and marks it used; an idle or too
// old session is ended. A session store that does not answer signs no
// one in.
func (s *sessions) get(ctx context.Context, id string) (session, bool) {
	if s.rdb != nil {
		key := rediskeys.ConsoleSession(hashOf(id))
		m, err := s.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			s.log.WarnContext(ctx, "console session store unavailable", "error", err)
			return session{}, false
		}
		created, err1 := strconv.ParseInt(m["created"], 10, 64)
		seen, err2 := strconv.ParseInt(m["seen"], 10, 64)
		if len(m) == 0 || err1 != nil || err2 != nil || m["person"] == "" || m["csrf"] == "" {
			return session{}, false
		}
		se := &session{id: id, person: m["person"], csrf: m["csrf"], created: time.UnixMilli(created), seen: time.UnixMilli(seen)}
		now := s.now()
		if s.expired(se, now) {
			s.rdb.Del(ctx, key)
			return session{}, false
		}
		// HSetXX-like: only a session that still exists is touched, so a
		// sign-out on another replica meanwhile is not undone.
		if err := touchScript.Run(ctx, s.rdb, []string{key}, now.UnixMilli()).Err(); err != nil && !errors.Is(err, redis.Nil) {
			s.log.WarnContext(ctx, "console session use not recorded", "error", err)
		}
		se.seen = now
		return *se, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok {
		return session{}, false
	}
	now := s.now()
	if s.expired(se, now) {
		delete(s.byID, id)
		return session{}, false
	}
	se.seen = now
	return *se, true
}

func (s *sessions) expired(se *session, now time.Time) bool {
	return now.Sub(se.seen) > s.idle || now.Sub(se.created) > s.max
}

// touchScript records a use of a session that still exists.
var touchScript = redis.NewScript(`if redis.call("EXISTS", KEYS[1]) == 1 then return redis.call("HSET", KEYS[1], "seen", ARGV[1]) end return 0`)

// end ends a session.
func (s *sessions) end(ctx context.Context, id string) {
	if s.rdb != nil {
		if err := s.rdb.Del(ctx, rediskeys.ConsoleSession(hashOf(id))).Err(); err != nil {
			s.log.WarnContext(ctx, "console session not ended in the store; it ends at its timeout", "error", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

func (s *sessions) sweepLocked(now time.Time) {
	for id, se := range s.byID {
		if s.expired(se, now) {
			delete(s.byID, id)
		}
	}
	for t, l := range s.links {
		if now.After(l.expires) {
			delete(s.links, t)
		}
	}
}

// oneTimeLink creates a sign-in token for person that works once, within
// linkTTL.
func (s *sessions) oneTimeLink(ctx context.Context, person string) (string, error) {
	if s.rdb != nil {
		t := randomToken()
		if err := s.rdb.Set(ctx, rediskeys.ConsoleSignInLink(hashOf(t)), person, linkTTL).Err(); err != nil {
			return "", fmt.Errorf("console session store: %w", err)
		}
		return t, nil
	}
	return s.oneTimeLinkLocal(person), nil
}

func (s *sessions) oneTimeLinkLocal(person string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	if len(s.links) >= maxLinks {
		for t := range s.links {
			delete(s.links, t)
			break
		}
	}
	t := randomToken()
	s.links[t] = link{person: person, expires: now.Add(linkTTL)}
	return t
}

// redeem consumes a one-time token: the first use returns its person,
// every later one nothing.
func (s *sessions) redeem(ctx context.Context, token string) (string, bool) {
	if s.rdb != nil {
		if token == "" {
			return "", false
		}
		// GETDEL: of two replicas redeeming at once, one gets the person.
		person, err := s.rdb.GetDel(ctx, rediskeys.ConsoleSignInLink(hashOf(token))).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			s.log.WarnContext(ctx, "console session store unavailable", "error", err)
		}
		return person, err == nil && person != ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.links[token]
	if !ok {
		return "", false
	}
	delete(s.links, token)
	if s.now().After(l.expires) {
		return "", false
	}
	return l.person, true
}

// setCookie hands the browser the session: HttpOnly (no script reads
// it), Secure, and SameSite=Strict (no other site's page sends it).
func setCookie(w http.ResponseWriter, se *session, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: se.id, Path: "/", MaxAge: int(maxAge.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
	})
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

// csrfMatches compares a presented token with the session's in constant
// time.
func csrfMatches(se session, presented string) bool {
	return presented != "" && subtle.ConstantTimeCompare([]byte(se.csrf), []byte(presented)) == 1
}
