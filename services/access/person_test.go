package access

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestPersonOnlyFromTheConsole(t *testing.T) {
	admin := Identity{Kind: Operator, Name: "admin"}
	tests := []struct {
		name       string
		caller     *Identity
		persons    []string
		want       string
		wantActor  string
		wantPerson bool
	}{
		{name: "the console", caller: &Console, persons: []string{"alice@example.test"}, want: "alice@example.test", wantPerson: true, wantActor: "operator/console for alice@example.test"},
		{name: "another operator", caller: &admin, persons: []string{"alice@example.test"}, wantActor: "operator/admin"},
		{name: "the front door", caller: &FrontDoor, persons: []string{"alice@example.test"}, wantActor: "service/frontdoor"},
		{name: "no admitted caller", persons: []string{"alice@example.test"}, wantActor: "none"},
		{name: "the console naming two people", caller: &Console, persons: []string{"alice@example.test", "bob@example.test"}, wantActor: "operator/console"},
		{name: "the console naming no one", caller: &Console, wantActor: "operator/console"},
		{name: "a name with a line break", caller: &Console, persons: []string{"alice\nforged: yes"}, wantActor: "operator/console"},
		{name: "a name too long", caller: &Console, persons: []string{strings.Repeat("a", MaxPersonLen+1)}, wantActor: "operator/console"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.MD{}
			for _, p := range tt.persons {
				md.Append(personKey, p)
			}
			ctx := metadata.NewIncomingContext(context.Background(), md)
			if tt.caller != nil {
				ctx = WithCaller(ctx, *tt.caller)
			}
			got, ok := Person(ctx)
			if got != tt.want || ok != tt.wantPerson {
				t.Fatalf("Person = %q, %v; want %q, %v", got, ok, tt.want, tt.wantPerson)
			}
			if a := Actor(ctx); a != tt.wantActor {
				t.Fatalf("Actor = %q, want %q", a, tt.wantActor)
			}
		})
	}
}

func TestForPersonReachesTheServer(t *testing.T) {
	out, _ := metadata.FromOutgoingContext(ForPerson(context.Background(), "alice@example.test"))
	if got := out.Get(personKey); len(got) != 1 || got[0] != "alice@example.test" {
		t.Fatalf("outgoing metadata = %v", out)
	}
}
