package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/console"
	"github.com/agtpsuite/agtp/services/devpki"
)

// ScreenshotsEnv names a directory the console test writes its
// screenshots to (docs/console/ holds the committed ones); without it
// they go to a temporary directory.
const ScreenshotsEnv = "AGTP_CONSOLE_SCREENSHOTS"

// startConsole runs the operator console against the cluster's services,
// with the console's own certificate, on a free loopback port; it reads
// the services' metrics from their admin listeners (frontAdmin is the
// front door's).
func startConsole(t *testing.T, c *Cluster, frontAdmin string) *console.Console {
	t.Helper()
	cfg := console.Default()
	for name, p := range c.Procs {
		cfg.Metrics[name] = p.HTTPAddr
	}
	cfg.Metrics["frontdoor"] = frontAdmin
	cfg.MetricsInterval = time.Second
	cfg.Addr = addr(t)
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = c.PKI.CA(), c.PKI.Cert(devpki.Console), c.PKI.Key(devpki.Console)
	for name, p := range c.Procs {
		cfg.Peers[name] = p.GRPCAddr
	}
	cfg.JWKSURL = "https://" + c.Procs["frontdoor"].HTTPSAddr + "/.well-known/jwks.json"
	// Small pages, so that the test follows a page token.
	cfg.PageSize = 2
	ctx, cancel := context.WithCancel(context.Background())
	con, err := console.New(ctx, cfg, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- con.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	return con
}

// TestConsoleInBrowser drives the operator console in headless Chromium
// against the suite as processes: a person signs in with the one-time
// link, approves an agent's escalation, revokes an AGP key, verifies the
// agent's chain (by the console and in the browser) and suspends the
// agent, and each change is checked where it lands.
func TestConsoleInBrowser(t *testing.T) {
	// The services serve their metrics on their admin listeners (the
	// front door needs one) for the health page.
	frontAdmin := addr(t)
	c := Start(t, Options{Env: []string{"AGTP_PROMETHEUS=on"}, ServiceEnv: map[string][]string{"frontdoor": {"HTTP_ADDR=" + frontAdmin}}})
	con := startConsole(t, c, frontAdmin)
	const person = "alice@example.test"
	worker := c.registerAgent(t, "console-worker", "orders:read", "orders:write")

	shots := os.Getenv(ScreenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox,
		// The suite's certificates come from its development CA, which
		// this throwaway browser profile does not hold.
		chromedp.IgnoreCertErrors,
		chromedp.WindowSize(1400, 900),
		// Chromium leaves its singleton socket's directory in TMPDIR when
		// it is stopped; give it one the test removes.
		chromedp.Env("TMPDIR="+t.TempDir()),
	)...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(browser, 4*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium (the Debian package chromium; make test installs it): %v", err)
	}
	// The key revocation asks for confirmation in a dialog: accept it.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	do := func(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(t *testing.T, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	screenshot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}

	// The agent escalates its task and waits.
	resp, esc := c.call(t, worker, "ESCALATE", "/", `{"task_id":"refund-console","reason":"confidence_threshold","context":{"order":"ord-1001","amount":"900.00"},"priority":"urgent"}`)
	escID, _ := esc["escalation_id"].(string)
	if resp.Status != agtp.StatusAccepted || esc["status"] != "pending_review" || escID == "" {
		t.Fatalf("ESCALATE = %d %v", resp.Status, esc)
	}
	row := "#esc-" + escID

	t.Run("sign in with the one-time link and approve the escalation", func(t *testing.T) {
		link, err := con.SignInLink(person)
		if err != nil {
			t.Fatal(err)
		}
		do(t, "sign in", chromedp.Navigate(link), visible(row), screenshot("escalations"))
		who, shown := text(t, "#person"), text(t, row)
		if who != person || !strings.Contains(shown, "confidence_threshold") || !strings.Contains(shown, "urgent") || !strings.Contains(shown, "refund-console") {
			t.Fatalf("signed in as %q; escalation row %q", who, shown)
		}
		do(t, "approve", chromedp.SendKeys(chromedp.CSS(row+" input[name=reason]"), "amount checked against the order"),
			chromedp.Click(chromedp.CSS(row+" button.approve")),
			visible(row+" .resolved"),
			screenshot("escalation-approved"),
		)
		resolved := text(t, row+" .resolved")
		if resolved != "accepted by "+person {
			t.Fatalf("row after approval says %q", resolved)
		}
		// The agent's task runs again, and its history names the person,
		// as the console's identity vouched for them.
		resp, task := c.call(t, worker, "QUERY", "/tasks/refund-console", "")
		if resp.Status != agtp.StatusOK || task["status"] != "running" || task["paused"] != false {
			t.Fatalf("task after approval = %d %v", resp.Status, task)
		}
		history, _ := task["history"].([]any)
		last, _ := history[len(history)-1].(map[string]any)
		if last["actor"] != "admin:"+person+" via operator/console" || last["detail"] != "amount checked against the order" {
			t.Fatalf("last task event = %v, want the person via the console", last)
		}
		// The approval is signed into the agent's lifecycle stream by
		// auditsvc, naming the person: read it there, not from the page,
		// and verify the stream.
		attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(row+" a.signed"), "data-audit-id"))
		if err != nil {
			t.Fatal(err)
		}
		signed := attr.Value
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		audit := auditv1.NewAuditServiceClient(c.Dial(t, "auditsvc"))
		ev, err := audit.ListLifecycleEvents(rctx, &auditv1.ListLifecycleEventsRequest{AgentId: worker, PageSize: 1})
		if err != nil || len(ev.GetEvents()) != 1 {
			t.Fatalf("newest lifecycle event = %v, %v", ev.GetEvents(), err)
		}
		payload := ev.GetEvents()[0].GetPayload().AsMap()
		if e := ev.GetEvents()[0]; e.GetAuditId() != signed || e.GetEventType() != "escalation_resolved" ||
			payload["actor"] != "operator/console for "+person || payload["person"] != person ||
			payload["target_id"] != escID || payload["confirm_status"] != "accepted" {
			t.Fatalf("newest lifecycle event %s %s %v; the page says it was signed as %s", e.GetAuditId(), e.GetEventType(), payload, signed)
		}
		if v, err := audit.VerifyChain(rctx, &auditv1.VerifyChainRequest{AgentId: worker, Stream: "lifecycle"}); err != nil || !v.GetValid() {
			t.Fatalf("the agent's lifecycle stream verifies: %v, %v", v, err)
		}
		do(t, "the approval on the agent's page", chromedp.Navigate(con.URL()+"/agents/"+worker), visible(`#lifecycle tr[data-audit-id="`+signed+`"]`))
		if actor := text(t, `#lifecycle tr[data-audit-id="`+signed+`"] td.actor`); actor != "operator/console for "+person {
			t.Fatalf("the agent's page shows the approval by %q", actor)
		}
	})

	t.Run("revoke an AGP key and see it refused", func(t *testing.T) {
		keys := agpv1.NewAgpServiceClient(c.Dial(t, "policysvc"))
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		k, err := keys.CreateApiKey(rctx, &agpv1.CreateApiKeyRequest{Label: "console e2e", AgentId: worker, Scopes: []string{"discover", "query"}})
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.Admin.Pool()}}}
		agp := &agpClient{t: t, base: "https://" + c.Procs["frontdoor"].HTTPSAddr, hc: hc, key: k.GetSecret()}
		if res := agp.do("POST", "/agp/discover", `{"businessId":"orders"}`); res.status != http.StatusOK {
			t.Fatalf("discover with the key before revocation = %d %s", res.status, res.body)
		}
		keyRow := "#key-" + k.GetKey().GetId()
		do(t, "revoke the key", chromedp.Navigate(con.URL()+"/access?agent="+worker),
			visible(keyRow),
			screenshot("access"),
			chromedp.Click(chromedp.CSS(keyRow+" button")),
			visible("#keys tr.done"),
		)
		done := text(t, "#keys tr.done")
		if !strings.Contains(done, k.GetKey().GetId()) || !strings.Contains(done, person) {
			t.Fatalf("after revocation the row says %q", done)
		}
		eventually(t, 10*time.Second, "the revoked key refused by the front door", func() bool {
			return agp.do("POST", "/agp/discover", `{"businessId":"orders"}`).status == http.StatusUnauthorized
		})
		ev, err := auditv1.NewAuditServiceClient(c.Dial(t, "auditsvc")).ListLifecycleEvents(rctx, &auditv1.ListLifecycleEventsRequest{AgentId: worker, PageSize: 1})
		if err != nil || len(ev.GetEvents()) != 1 || ev.GetEvents()[0].GetEventType() != "agp_key_revoked" ||
			ev.GetEvents()[0].GetPayload().AsMap()["actor"] != "operator/console for "+person {
			t.Fatalf("newest lifecycle event after the key's revocation = %v, %v", ev.GetEvents(), err)
		}
	})

	t.Run("open the agent's chain and see it verified, by the console and in the browser", func(t *testing.T) {
		do(t, "verify by the console", chromedp.Navigate(con.URL()+"/audit?agent="+worker+"&verify=25"), visible("#verification"))
		byConsole := text(t, "#verification")
		do(t, "verify in the browser", chromedp.Click(chromedp.CSS("#verify-browser")), visible("#browser-verification.ok"), screenshot("audit"))
		inBrowser := text(t, "#browser-verification")
		checks, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("tr.record .check"), e => e.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(byConsole, "Verified by the console") {
			t.Fatalf("console's verification: %q", byConsole)
		}
		if !strings.HasPrefix(inBrowser, "Verified in this browser") || len(checks) < 2 {
			t.Fatalf("browser's verification: %q over %d records", inBrowser, len(checks))
		}
		for i, ch := range checks {
			if ch != "✓" {
				t.Fatalf("record %d checked %q in the browser", i, ch)
			}
		}
		// The chain is longer than a page of two: the next page continues
		// with the record the page's last one links to.
		head, err := strconv.Atoi(text(t, "tr.record td"))
		if err != nil || head < 3 {
			t.Fatalf("the head is record %d (%v), want at least 3", head, err)
		}
		want := strconv.Itoa(head - 2)
		next, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelectorAll("tr.record")[1].dataset.previous`))
		if err != nil {
			t.Fatal(err)
		}
		do(t, "next page", chromedp.Click(chromedp.CSS("a.next")), visible(`tr.record[data-audit-id="`+next+`"]`))
		if first := text(t, "tr.record td"); first != want {
			t.Fatalf("the next page starts at record %q, want %s", first, want)
		}
	})

	t.Run("health shows each service's readiness and its request and error rates from its metrics", func(t *testing.T) {
		// The rates need two scrapes of each service; the page says so
		// until then.
		// The agent keeps making requests meanwhile: the front door's rate
		// shows them.
		eventually(t, 30*time.Second, "rates for every service, the front door's above zero", func() bool {
			c.call(t, worker, "QUERY", "/orders/ord-1001", "")
			if err := chromedp.Do(ctx, chromedp.Navigate(con.URL()+"/health"), visible("#health")); err != nil {
				return false
			}
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#health td.requests").length`))
			if err != nil || n != 6 {
				return false
			}
			front, err := strconv.ParseFloat(text(t, "#health-frontdoor td.requests"), 64)
			return err == nil && front > 0
		})
		do(t, "health", screenshot("health"))
		for _, name := range []string{"frontdoor", "catalogsvc", "policysvc", "rcnssvc", "identitysvc", "auditsvc"} {
			row := "#health-" + name
			if st := text(t, row+" td:nth-child(2)"); st != "SERVING" {
				t.Errorf("%s readiness %q", name, st)
			}
			for _, col := range []string{"requests", "errors"} {
				if v, err := strconv.ParseFloat(text(t, row+" td."+col), 64); err != nil || v < 0 {
					t.Errorf("%s %s = %q", name, col, text(t, row+" td."+col))
				}
			}
		}
	})

	t.Run("suspend the agent with a typed confirmation; the signed lifecycle event names the person", func(t *testing.T) {
		suspend := func(confirm string) chromedp.Action[chromedp.Void] {
			return chromedp.Steps(chromedp.Navigate(con.URL()+"/agents/"+worker),
				visible("#agent-status"),
				chromedp.SetValue(chromedp.CSS("select[name=transition]"), "suspend"),
				chromedp.SendKeys(chromedp.CSS("input[name=reason]"), "investigating the refund"),
				chromedp.SendKeys(chromedp.CSS("input[name=confirm]"), confirm),
				chromedp.Submit(chromedp.CSS("form.lifecycle")),
			)
		}
		do(t, "wrong confirmation", suspend("some-other-agent"),
			visible("#error-message"),
		)
		refused := text(t, "#error-message")
		if !strings.Contains(refused, `type "console-worker" to confirm`) {
			t.Fatalf("a wrong confirmation got %q", refused)
		}
		do(t, "suspend", suspend("console-worker"),
			// The page after the change says so; the page before did not.
			visible(`#agent-status[data-status="suspended"]`),
			screenshot("agent"),
		)
		st, actor := text(t, "#agent-status"), text(t, "#lifecycle td.actor")
		if st != "suspended" || actor != "operator/console for "+person {
			t.Fatalf("agent status %q, newest lifecycle actor %q", st, actor)
		}
		// The event is signed into the agent's lifecycle stream by
		// auditsvc: read it there, not from the page.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		ev, err := auditv1.NewAuditServiceClient(c.Dial(t, "auditsvc")).ListLifecycleEvents(rctx, &auditv1.ListLifecycleEventsRequest{AgentId: worker, PageSize: 1})
		if err != nil || len(ev.GetEvents()) != 1 || ev.GetEvents()[0].GetPayload().GetFields()["actor"].GetStringValue() != "operator/console for "+person {
			t.Fatalf("newest lifecycle event = %v, %v", ev.GetEvents(), err)
		}
		if resp, _ := c.call(t, worker, "QUERY", "/orders/ord-1001", ""); resp.Status == agtp.StatusOK {
			t.Fatal("the suspended agent is still served")
		}
		// The status filter applies to the whole registry, not to a page
		// of two: the one suspended agent is listed first, and alone,
		// wherever it sits among the active ones.
		do(t, "suspended agents", chromedp.Navigate(con.URL()+"/agents?status=suspended"), visible("#agents"))
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#agents tr.agent"), e => e.dataset.agentId)`))
		if err != nil || len(ids) != 1 || ids[0] != worker {
			t.Fatalf("suspended agents listed: %v, %v; want only %s", ids, err, worker)
		}
	})
}
