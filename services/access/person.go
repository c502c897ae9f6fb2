package access

import (
	"context"
	"strings"
	"unicode"

	"google.golang.org/grpc/metadata"
)

// Console is the operator console's identity. The console acts for the
// people who sign in to it, and it alone may say which person a change is
// made for: a person named by any other caller is ignored, the way only
// the front door's word on an agent is taken.
var Console = Identity{Kind: Operator, Name: "console"}

// personKey is the metadata the console names the signed-in person with.
const personKey = "agtp-console-person"

// MaxPersonLen bounds a forwarded person's name (an e-mail address or an
// OpenID Connect subject).
const MaxPersonLen = 128

// ForPerson is the outgoing context of a call the console makes for the
// signed-in person.
func ForPerson(ctx context.Context, person string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, personKey, person)
}

// Person is the person the console forwarded with the current call. It
// is reported only when the guard admitted the call for the console's
// own certificate, and only when the name is one printable line of at
// most MaxPersonLen bytes.
func Person(ctx context.Context) (string, bool) {
	if id, ok := Caller(ctx); !ok || id != Console {
		return "", false
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	v := md.Get(personKey)
	if len(v) != 1 || !ValidPerson(v[0]) {
		return "", false
	}
	return v[0], true
}

// ValidPerson reports whether p may name a person: one printable line of
// 1 to MaxPersonLen bytes.
func ValidPerson(p string) bool {
	if p == "" || len(p) > MaxPersonLen {
		return false
	}
	return !strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) && r != ' ' })
}

// Actor names the caller of the current call in the events it causes:
// its identity, and for the console the person it acts for
// ("operator/console for alice@example.com").
func Actor(ctx context.Context) string {
	id, _ := Caller(ctx)
	if p, ok := Person(ctx); ok {
		return id.String() + " for " + p
	}
	return id.String()
}
