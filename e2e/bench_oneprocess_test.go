package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
)

// TestOneProcessChildServesMakeRunsSuite: the one-process scenario's child
// reports where make run's suite listens once its front door answers,
// agents register through the identitysvc it names and are served with
// their Agent Certificates, and the child stops when its stdin ends.
func TestOneProcessChildServesMakeRunsSuite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeOneProcessChild(ctx, stdinR, stdoutW)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("no address line: %v (child: %v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()
	var addrs oneProcessAddrs
	if err := json.Unmarshal([]byte(line), &addrs); err != nil || addrs.AGTP == "" || addrs.Identity == "" || addrs.StateDir == "" {
		t.Fatalf("address line %q: %v", line, err)
	}

	layout := devpki.Layout{Dir: addrs.StateDir}
	admin, err := kit.LoadMTLS(layout.CA(), layout.Cert(devpki.Admin), layout.Key(devpki.Admin))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := kit.NewTelemetry(ctx, "test", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := registerAgent(ctx, addrs.Identity, admin, tel, "one-process-agent", benchScopes...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadgen.Run(ctx, loadgen.Config{Name: "one-process", Transport: loadgen.TransportTCP, Concurrency: 2, Mix: loadgen.PipelineMix,
		Target: loadgen.Target{Addr: addrs.AGTP, ServerName: "localhost", Roots: admin.Pool()},
		Agents: []string{agent}, AgentCerts: []tls.Certificate{*AgentCertificate(agent)},
		Warmup: 100 * time.Millisecond, Duration: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed == 0 || r.Statuses[200] != r.Completed {
		t.Fatalf("%d responses, statuses %v, errors %v", r.Completed, r.Statuses, r.ErrorExamples)
	}

	stdinW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the child ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not stop when its stdin ended")
	}
}
