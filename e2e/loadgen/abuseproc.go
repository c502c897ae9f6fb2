package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// AbuseProcess is an abuser running in a child process. Real abusers are
// other programs: run in the measuring process, the abuser's goroutines,
// allocations and garbage collection would delay the well-behaved
// client's own reads and writes and be counted as the server's latency.
type AbuseProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
	done  chan error
}

// Flags of the child side (ServeAbuseChild); a command that runs it must
// accept them.
const (
	FlagAbuseChild      = "abuse-child"
	FlagAbuseAddr       = "abuse-addr"
	FlagAbuseCA         = "abuse-ca"
	FlagAbuseServerName = "abuse-server-name"
)

// StartAbuseProcess runs argv with the child flags for cfg (kind, target
// address and server name, and caFile, the PEM roots of the target's
// certificate); the child uses the kind's defaults otherwise.
func StartAbuseProcess(ctx context.Context, argv []string, cfg AbuseConfig, caFile string) (*AbuseProcess, error) {
	if len(argv) == 0 {
		return nil, errors.New("no abuse command")
	}
	if err := cfg.withDefaults().Validate(); err != nil {
		return nil, err
	}
	args := append(append([]string{}, argv[1:]...),
		"-"+FlagAbuseChild, cfg.Kind, "-"+FlagAbuseAddr, cfg.Target.Addr,
		"-"+FlagAbuseServerName, cfg.Target.ServerName, "-"+FlagAbuseCA, caFile)
	p := &AbuseProcess{cmd: exec.CommandContext(ctx, argv[0], args...), done: make(chan error, 1)}
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = os.Stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start abuser: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// Stop tells the child to stop (by closing its stdin) and returns what it
// did.
func (p *AbuseProcess) Stop() (*AbuseResult, error) {
	p.stdin.Close()
	var err error
	select {
	case err = <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.done
	}
	if err != nil {
		return nil, fmt.Errorf("abuser: %w", err)
	}
	var r AbuseResult
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("abuser result %q: %w", p.out.String(), err)
	}
	return &r, nil
}

// Pid is the child's process ID, for measuring what the abuser itself
// costs the machine it shares with the server.
func (p *AbuseProcess) Pid() int { return p.cmd.Process.Pid }

// ServeAbuseChild is the child's side: it runs cfg's abuse until stdin
// reaches its end, then writes the result to stdout as JSON.
//
// It runs at idle priority (runAtIdlePriority) when the system allows:
// an attacker elsewhere takes no CPU from the server or from the clients
// measuring it, while an abuser sharing their machine would, and its own
// work (a full handshake per attempt) would then be counted as the
// front door's weakness. At idle priority it still makes its attempts
// whenever a core is free; AbuseResult.Attempts shows whether it kept
// its rate.
func ServeAbuseChild(ctx context.Context, cfg AbuseConfig, stdin io.Reader, stdout io.Writer) error {
	idleErr := runAtIdlePriority()
	if idleErr != nil {
		fmt.Fprintf(os.Stderr, "abuser: staying at normal priority: %v\n", idleErr)
	}
	a, err := StartAbuse(ctx, cfg)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	r := a.Stop()
	r.IdlePriority = idleErr == nil
	return json.NewEncoder(stdout).Encode(r)
}
