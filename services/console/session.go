package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
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

// sessions keeps the console's sessions in memory: a console replica's
// sessions end when it restarts, and a person signs in again.
type sessions struct {
	mu    sync.Mutex
	byID  map[string]*session
	links map[string]link
	idle  time.Duration
	max   time.Duration
	now   func() time.Time
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

// start opens a session for person.
func (s *sessions) start(person string) *session {
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
// old session is ended.
func (s *sessions) get(id string) (session, bool) {
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

// end ends a session.
func (s *sessions) end(id string) {
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
func (s *sessions) oneTimeLink(person string) string {
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
func (s *sessions) redeem(token string) (string, bool) {
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
