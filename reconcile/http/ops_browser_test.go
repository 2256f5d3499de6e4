package http_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// opsChromium is the headless browser the browser test drives: Debian's
// package "chromium".
const opsChromium = "/usr/bin/chromium"

// opsBrowserOutput collects the browser's stdout and stderr, to show them
// when the test fails.
type opsBrowserOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *opsBrowserOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *opsBrowserOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// TestOpsBrowserResolve drives the operator pages in a real headless
// Chromium: sign in through the form, open the list (escalated cases and
// audit findings), open the escalated case, ask for the provider's live
// view, try to resolve it as declined against the provider (refused, with
// the provider's answer and the override field open), resolve it as
// succeeded with evidence, then close an audit finding with a note; then
// checks the database.
func TestOpsBrowserResolve(t *testing.T) {
	if _, err := exec.LookPath(opsChromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("headless Chromium not found at %s (%v); CI is set, so this is a failure, not a skip: install the Debian package chromium", opsChromium, err)
		}
		t.Skipf("skipping the browser test: headless Chromium not found at %s (%v); install the Debian package chromium (apt-get install -y chromium)", opsChromium, err)
	}
	start := time.Now()
	f := setupOps(t)
	p := f.escalated("cus-browser")
	charge := f.fake.ChargesFor(p.ID)[0].ID
	_, findings := f.auditFindings()
	var orphan reconcile.Finding
	for _, fd := range findings {
		if fd.Kind == reconcile.FindingOrphanCharge {
			orphan = fd
		}
	}

	// Chromium accepts Secure cookies over plain http only from a
	// potentially trustworthy origin: localhost.
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://localhost:" + u.Port()

	// Everything the browser does is bounded by this deadline; each step
	// has its own, shorter one.
	testCtx, cancelTest := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelTest()
	out := &opsBrowserOutput{}
	allocCtx, cancelAlloc := opsChromiumAllocator(t, testCtx, out)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer func() {
		_ = chromedp.Cancel(ctx) // close the browser gracefully
		cancelBrowser()
	}()
	fail := func(step string, err error) {
		t.Helper()
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
		t.Fatalf("browser step %q: %v\npage:\n%s\nbrowser output:\n%s", step, err, html, out.String())
	}

	// Start the browser under the overall deadline only: a timeout on
	// the first Run would bound the browser's whole life.
	browserStart := time.Now()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v\nbrowser output:\n%s", err, out.String())
	}
	t.Logf("Chromium started in %v", time.Since(browserStart).Round(time.Millisecond))

	step := func(name string, fn func(ctx context.Context) error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		began := time.Now()
		if err := fn(sctx); err != nil {
			fail(name, err)
		}
		t.Logf("step %-28s %v", name, time.Since(began).Round(time.Millisecond))
	}
	text := func(ctx context.Context, id string) (string, error) {
		return chromedp.Run(ctx, chromedp.Text(chromedp.ID(id), chromedp.NodeVisible))
	}

	step("open /ops unauthenticated", func(ctx context.Context) error {
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+"/ops"))
		if err != nil {
			return err
		}
		if resp.Status != 401 {
			t.Errorf("GET /ops without a session: status %d, want 401", resp.Status)
		}
		return chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("login-form")))
	})

	step("sign in", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("operator"), "Olivia Operator"),
			chromedp.SendKeys(chromedp.ID("token"), opsToken),
		); err != nil {
			return err
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("login-submit")))
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			t.Errorf("after signing in: status %d, want 200", resp.Status)
		}
		return chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("cases")))
	})

	step("list shows the case", func(ctx context.Context) error {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			return err
		}
		if loc != base+"/ops" {
			t.Errorf("after signing in the browser is at %s, want %s/ops", loc, base)
		}
		table, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("cases"), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		for _, want := range []string{p.ID, "12.50 EUR", "cus-browser", "attempts exhausted", "uncertain"} {
			if !strings.Contains(table, want) {
				t.Errorf("the list does not show %q:\n%s", want, table)
			}
		}
		found, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("findings"), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		for _, want := range []string{orphan.PaymentID, "orphan charge", "9.99 USD", "duplicate charge"} {
			if !strings.Contains(found, want) {
				t.Errorf("the findings table does not show %q:\n%s", want, found)
			}
		}
		return nil
	})

	step("open the case", func(ctx context.Context) error {
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#cases a[href="/ops/purchases/`+p.ID+`"]`), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			t.Errorf("case page: status %d", resp.Status)
		}
		return chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("live-none")), chromedp.WaitVisible(chromedp.ID("resolve-form")))
	})

	step("ask for the live view", func(ctx context.Context) error {
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("live-submit"), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			t.Errorf("after asking the provider: status %d, want 200 (after the 303)", resp.Status)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("live-view"))); err != nil {
			return err
		}
		live, err := text(ctx, "live-text")
		if err != nil {
			return err
		}
		if !strings.Contains(live, "outcome=succeeded") || !strings.Contains(live, "payment="+charge) {
			t.Errorf("live view %q, want the provider's succeeded charge %s", live, charge)
		}
		return nil
	})

	step("declined is refused", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.ID("to-declined"), chromedp.NodeVisible),
			chromedp.SendKeys(chromedp.ID("evidence"), "customer says the card was not charged"),
		); err != nil {
			return err
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("resolve-submit"), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		if resp.Status != 409 {
			t.Errorf("resolving declined against the provider: status %d, want 409", resp.Status)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("flash")), chromedp.WaitVisible(chromedp.ID("override-provider"))); err != nil {
			return err
		}
		flash, err := text(ctx, "flash")
		if err != nil {
			return err
		}
		state, err := text(ctx, "state")
		if err != nil {
			return err
		}
		if !strings.Contains(flash, "contradicts this resolution") || !strings.Contains(flash, charge) || state != "uncertain: outcome unknown" {
			t.Errorf("after the refusal the page says %q, state %q; want the provider's answer naming %s, and the state unchanged", flash, state, charge)
		}
		return nil
	})

	evidence := "Stripe dashboard: " + charge + " succeeded, 12.50 EUR captured <checked twice>"
	step("resolve as succeeded", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.ID("to-succeeded"), chromedp.NodeVisible),
			chromedp.SetValue(chromedp.ID("evidence"), evidence),
		); err != nil {
			return err
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("resolve-submit"), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			t.Errorf("after resolving: status %d, want 200 (after the 303)", resp.Status)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("flash")), chromedp.WaitVisible(chromedp.ID("no-resolve"))); err != nil {
			return err
		}
		flash, err := text(ctx, "flash")
		if err != nil {
			return err
		}
		state, err := text(ctx, "state")
		if err != nil {
			return err
		}
		if !strings.Contains(flash, "Resolved as succeeded by Olivia Operator") || state != "succeeded" {
			t.Errorf("after resolving the page says %q, state %q", flash, state)
		}
		return nil
	})
	closeNote := "test charge by support, refunded: re_77"
	step("close a finding", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ops"), chromedp.WaitVisible(chromedp.ID("findings"))); err != nil {
			return err
		}
		link := fmt.Sprintf(`#findings a[href="/ops/findings/%d"]`, orphan.ID)
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(link), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.ID("close-form")),
			chromedp.SendKeys(chromedp.ID("close-note"), closeNote),
		); err != nil {
			return err
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("close-submit"), chromedp.NodeVisible))
		if err != nil {
			return err
		}
		if resp.Status != 200 {
			t.Errorf("after closing: status %d, want 200 (after the 303)", resp.Status)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("flash")), chromedp.WaitVisible(chromedp.ID("closed-by"))); err != nil {
			return err
		}
		flash, err := text(ctx, "flash")
		if err != nil {
			return err
		}
		if !strings.Contains(flash, "closed by Olivia Operator") {
			t.Errorf("after closing the page says %q", flash)
		}
		return nil
	})
	t.Logf("browser flow done in %v (test total so far %v)", time.Since(browserStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// The database.
	rec := f.record(p.ID)
	if rec.Purchase.State != statemachine.Succeeded || rec.Purchase.Escalated() {
		t.Errorf("purchase: %s, escalated %v; want succeeded and off the list", rec.Purchase.State, rec.Purchase.Escalated())
	}
	var ops []reconcile.TransitionRecord
	for _, tr := range rec.Transitions {
		if tr.Cause == reconcile.CauseOperator {
			ops = append(ops, tr)
		}
	}
	if len(ops) != 2 ||
		ops[0].From != statemachine.Uncertain || ops[0].To != statemachine.Reconciling ||
		ops[1].From != statemachine.Reconciling || ops[1].To != statemachine.Succeeded {
		t.Fatalf("operator transitions: %+v, want uncertain→reconciling→succeeded", ops)
	}
	for _, tr := range ops {
		if tr.Actor != "operator:Olivia Operator" || !strings.Contains(tr.Evidence, evidence) {
			t.Errorf("transition %s→%s: actor %q evidence %q", tr.From, tr.To, tr.Actor, tr.Evidence)
		}
	}
	if last := rec.Transitions[len(rec.Transitions)-1]; last != ops[1] {
		t.Errorf("the last transition is %+v, not the operator's", last)
	}
	if len(rec.Actions) != 1 {
		t.Fatalf("operator actions: %+v", rec.Actions)
	}
	a := rec.Actions[0]
	wantSaw := "outcome=succeeded status=succeeded payment=" + charge + " amount=12.50 EUR"
	if a.Operator != "Olivia Operator" || a.Action != "resolve" || a.Evidence != evidence ||
		!strings.HasPrefix(a.Saw, wantSaw) || a.Did != "uncertain→reconciling→succeeded" {
		t.Errorf("operator action: %+v\nwant operator Olivia Operator, evidence %q, saw %q…", a, evidence, wantSaw)
	}
	if got, err := f.svc.Finding(context.Background(), orphan.ID); err != nil || got.Open() || got.ClosedBy != "Olivia Operator" || got.CloseNote != closeNote {
		t.Errorf("finding after closing it in the browser: %+v %v", got, err)
	}
	if n := len(f.fake.ChargesFor(p.ID)); n != 1 {
		t.Errorf("the provider holds %d charges for the purchase, want 1", n)
	}
	t.Logf("browser test total %v", time.Since(start).Round(time.Millisecond))
}

// opsChromiumAllocator starts a headless Chromium for the ops browser
// tests, its output to out, its profile in a temporary directory.
func opsChromiumAllocator(t *testing.T, ctx context.Context, out *opsBrowserOutput) (context.Context, context.CancelFunc) {
	t.Helper()
	return chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(opsChromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // containers often have a tiny /dev/shm
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(out),
	)
}
