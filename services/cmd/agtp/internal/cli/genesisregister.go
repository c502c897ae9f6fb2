package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/reasons"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/jcs"
)

type genesisRegisterOptions struct {
	name            string
	activate        bool
	grpcAddr, admin string
	adminFlags
	help bool
}

func genesisRegisterFlags() (*flagSet, *genesisRegisterOptions) {
	o := &genesisRegisterOptions{adminFlags: adminFlags{timeout: 30 * time.Second}}
	f := newFlagSet("agtp genesis register", io.Discard)
	f.str(&o.name, []string{"name"}, "LABEL", "the agent's name in the registry (default: org_label, else agent- and 12 hex digits)")
	f.boolean(&o.activate, []string{"activate"}, "activate at once (else the agent stays pending until ACTIVATE)")
	f.str(&o.grpcAddr, []string{"grpc"}, "HOST:PORT", "identitysvc's gRPC address (default "+DefaultIdentityGRPC+")")
	f.str(&o.admin, []string{"admin"}, "URL", "use identitysvc's REST gateway instead, e.g. https://127.0.0.1:8104")
	o.adminFlags.define(f)
	f.boolean(&o.help, []string{"h", "help"}, "show this help")
	return f, o
}

func runGenesisRegister(ctx context.Context, args []string, env Env) int {
	const name = "register"
	f, o := genesisRegisterFlags()
	pos, code, done := parseGenesisFlags(env, name, f, &o.help, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return genesisUsageError(env, name, fmt.Sprintf("want one GENESIS file, got %d arguments", len(pos)))
	}
	if o.grpcAddr != "" && o.admin != "" {
		return genesisUsageError(env, name, "--grpc and --admin are two ways to the same API; give one")
	}
	if msg := cmpOr(o.tlsProblem(), o.timeoutProblem()); msg != "" {
		return genesisUsageError(env, name, msg)
	}
	data, err := readGenesisFile(pos[0], env.Stdin)
	if err != nil {
		return genesisFail(env, name, err)
	}
	// Checked here first, so a broken document gets the same precise
	// answer as verify and never reaches the registry.
	g, err := genesis.Load(data)
	if err != nil {
		code := invalidGenesis(env, name, displayName(pos[0]), err)
		fmt.Fprintln(env.Stderr, "  (nothing was sent)")
		return code
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return genesisFail(env, name, err)
	}
	var admin identityAdmin
	where := ""
	if o.admin != "" {
		admin, err = newRESTAdmin(o.admin, tlsCfg)
		where = o.admin
	} else {
		addr := cmpOr(o.grpcAddr, DefaultIdentityGRPC)
		admin, err = newGRPCAdmin(addr, tlsCfg)
		where = addr
	}
	if err != nil {
		return genesisUsageError(env, name, err.Error())
	}
	defer admin.close()

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rec, err := admin.register(ctx, &identityv1.RegisterGenesisRequest{Genesis: string(data), Name: o.name, Activate: o.activate})
	if err != nil {
		return registerFailed(ctx, env, admin, where, g, data, err)
	}
	fmt.Fprintf(env.Stdout, "registered %s\n", rec.GetAgentId())
	printRecord(env.Stdout, rec)
	if rec.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED {
		fmt.Fprintln(env.Stderr, "note: the agent is pending: ACTIVATE it, or register with --activate next time")
	}
	return ExitOK
}

func printRecord(w io.Writer, rec *identityv1.AgentRecord) {
	fmt.Fprintf(w, "  agent-id:  %s\n", rec.GetAgentId())
	fmt.Fprintf(w, "  name:      %s\n", rec.GetName())
	fmt.Fprintf(w, "  status:    %s\n", callerpolicy.StateName(rec.GetStatus()))
	fmt.Fprintf(w, "  trust:     tier %d, %s\n", rec.GetTrustTier(), cmpOr(rec.GetVerificationPath(), "no verification path"))
	fmt.Fprintf(w, "  issuer:    %s\n", rec.GetIssuerFingerprint())
}

// registerFailed explains a refused or failed registration. An answer
// from identitysvc exits with its AGTP status class; no answer exits 1.
func registerFailed(ctx context.Context, env Env, admin identityAdmin, where string, g *genesis.Genesis, sent []byte, err error) int {
	agtpStatus, reason, explanation, _, answered := serviceAnswer(env, "register", where, err)
	if !answered {
		return ExitError
	}
	id := g.AgentID
	say := func(format string, args ...any) {
		fmt.Fprintf(env.Stderr, "agtp genesis register: %d %s: %s\n", agtpStatus, reason, fmt.Sprintf(format, args...))
	}
	switch reason {
	case reasons.AgentIDCollision:
		// One reason covers both cases; what the registry holds tells
		// them apart.
		rec, rerr := admin.resolve(ctx, id)
		stored, gerr := admin.genesis(ctx, id)
		switch {
		case rerr != nil || gerr != nil:
			say("agent %s is already registered", id)
		case sameDocument(stored, sent):
			say("agent %s is already registered, from this same Genesis: name %s, status %s; nothing changed", id, rec.GetName(), callerpolicy.StateName(rec.GetStatus()))
		default:
			say("collision: the registry holds a different document under Agent-ID %s (name %s, status %s); nothing was registered",
				id, rec.GetName(), callerpolicy.StateName(rec.GetStatus()))
		}
	case reasons.AgentIDRetired:
		say("agent %s was retired, and a retired Agent-ID is never registered again (core §6.5.9)", id)
		fmt.Fprintln(env.Stderr, "  hint: make a new Genesis for a new agent: agtp genesis new ...")
	case reasons.AgentNameTaken:
		say("%s", explanation)
		fmt.Fprintln(env.Stderr, "  hint: choose another name with --name LABEL")
	case reasons.ExperimentalLabelRequired:
		say("%s", explanation)
		fmt.Fprintln(env.Stderr, "  hint: --name X-"+cmpOr(g.OrgLabel, "agent"))
	default:
		say("%s", explanation)
	}
	return exitForStatus(agtpStatus)
}

// sameDocument compares two Genesis documents by their canonical forms.
func sameDocument(a, b []byte) bool {
	ca, err := jcs.Canonicalize(a)
	if err != nil {
		return false
	}
	cb, err := jcs.Canonicalize(b)
	return err == nil && bytes.Equal(ca, cb)
}
