package http_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// opsLayoutCheck runs in a page and lists what breaks its layout: an
// element past the viewport's right edge that no scroll container holds,
// an element past its card's edges, and a table cell narrower than the
// longest word of its text, so that the word breaks (the text of a .clip element is cut on purpose,
// with the whole of it in the title, so it does not count).
const opsLayoutCheck = `(() => {
  const bad = [];
  const vw = document.documentElement.clientWidth;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).join('.') : '');
  const scroller = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden') return p;
    }
    return null;
  };
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const sc = scroller(el);
    if (!sc && r.right > vw + 1) bad.push('past the viewport (' + vw + 'px): ' + name(el) + ' ends at ' + Math.round(r.right));
    const card = el.parentElement && el.parentElement.closest('.card');
    if (card && !(sc && card.contains(sc))) {
      const c = card.getBoundingClientRect();
      if (r.right > c.right + 1 || r.left < c.left - 1) bad.push('past its card: ' + name(el) + ' spans ' + Math.round(r.left) + '..' + Math.round(r.right) + ', card ' + Math.round(c.left) + '..' + Math.round(c.right));
    }
  }
  const range = document.createRange();
  for (const cell of document.querySelectorAll('td, th')) {
    const cs = getComputedStyle(cell);
    const inner = cell.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (n.parentElement.closest('.clip')) continue;
      // A word ends at white space or after a hyphen, where lines may break.
      for (const m of n.textContent.matchAll(/[^\s-]+-?/g)) {
        range.setStart(n, m.index);
        range.setEnd(n, m.index + m[0].length);
        const rects = range.getClientRects();
        const w = range.getBoundingClientRect().width;
        if (rects.length > 1 || w > inner + 1) bad.push('cell narrower (' + Math.round(inner) + 'px) than its word ' + JSON.stringify(m[0]) + ' (' + Math.round(w) + 'px, ' + rects.length + ' lines) in ' + name(cell.closest('table') || cell));
      }
    }
  }
  return bad.slice(0, 20);
})()`

// TestOpsBrowserLayout loads every operator page with a realistic load
// (50 escalated purchases, 20 findings with long evidence, a dead outbox
// subscription) at 1280 and at 390 pixels wide, on PostgreSQL and on
// SQLite, and checks in the page that nothing runs past the viewport or
// its card and that no table cell is narrower than its longest word. The
// screenshots are kept in the test's artifact directory (go test
// -artifacts).
func TestOpsBrowserLayout(t *testing.T) {
	if _, err := exec.LookPath(opsChromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("headless Chromium not found at %s (%v); CI is set, so this is a failure, not a skip: install the Debian package chromium", opsChromium, err)
		}
		t.Skipf("skipping the browser test: headless Chromium not found at %s (%v); install the Debian package chromium (apt-get install -y chromium)", opsChromium, err)
	}
	for _, store := range []struct {
		name string
		open func(testing.TB, func() time.Time) reconcile.Store
	}{
		{"postgres", newStoreAt},
		{"sqlite", newSQLiteStoreAt},
	} {
		t.Run(store.name, func(t *testing.T) {
			f := setupOpsOn(t, store.open)
			pages := opsLayoutData(t, f)
			ctx := opsBrowserSession(t, f)
			dir := t.ArtifactDir()
			for _, width := range []int64{1280, 390} {
				for _, page := range pages {
					sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					err := chromedp.Do(sctx,
						chromedp.EmulateViewport(width, 900),
						chromedp.Navigate(f.browserBase()+page.path),
						chromedp.WaitVisible(chromedp.CSS("main")),
					)
					var bad []string
					var size []int64
					var shot []byte
					if err == nil {
						bad, err = chromedp.Run(sctx, chromedp.Evaluate[[]string](opsLayoutCheck))
					}
					if err == nil {
						size, err = chromedp.Run(sctx, chromedp.Evaluate[[]int64](`[document.documentElement.scrollWidth, document.documentElement.scrollHeight]`))
					}
					if err == nil {
						shot, err = chromedp.Run(sctx, chromedp.FullScreenshot(80))
					}
					cancel()
					if err != nil {
						t.Fatalf("%s at %d px: %v", page.path, width, err)
					}
					t.Logf("%-32s at %4d px: page %d × %d px", page.name, width, size[0], size[1])
					if size[0] > width {
						t.Errorf("%s at %d px: the page is %d px wide", page.path, width, size[0])
					}
					for _, b := range bad {
						t.Errorf("%s at %d px: %s", page.path, width, b)
					}
					file := filepath.Join(dir, fmt.Sprintf("%s-%d.jpg", page.name, width))
					if err := os.WriteFile(file, shot, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// newSQLiteStoreAt is newStoreAt on SQLite, in a temporary directory.
func newSQLiteStoreAt(tb testing.TB, clock func() time.Time) reconcile.Store {
	tb.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(tb.TempDir(), "ops.db"), Now: clock})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return st
}

type opsLayoutPage struct{ name, path string }

// opsLayoutData fills f's store with what the pages show on a busy day
// and returns the pages to look at.
func opsLayoutData(t *testing.T, f *opsFixture) []opsLayoutPage {
	t.Helper()
	ctx := t.Context()
	if _, err := f.svc.AddSubscription(ctx, reconcile.Subscription{Name: "warehouse-fulfilment-eu-west", URL: "https://warehouse.example/hooks/payrecon/events", Secret: "whsec_warehouse"}); err != nil {
		t.Fatal(err)
	}
	var escalated []reconcile.Purchase
	for i := range 50 {
		escalated = append(escalated, f.escalated(fmt.Sprintf("customer-%02d@a-rather-long-company-domain.example", i)))
	}
	for range 3 {
		f.run("cus-outbox") // succeeds: an event for the subscription
	}
	if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
		ds, err := tx.ClaimDeliveries(ctx, "relay", 100, time.Minute)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := tx.FinishDelivery(ctx, d, reconcile.DeliveryDead, time.Time{},
				"attempt 9: HTTP 503 Service Unavailable from https://warehouse.example/hooks/payrecon/events (failing for 72h0m0s, past the retry window)"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		fd := reconcile.Finding{
			Provider: "fake", Kind: reconcile.FindingOrphanCharge, Amount: int64(1000 + i), Currency: "eur",
			PaymentID: fmt.Sprintf("pi_3QxLongPaymentIdentifier%02dAbCdEfGhIjKlMnOp", i), Status: "succeeded",
			Evidence: fmt.Sprintf("money taken for purchase id %q, which the books do not know; seen in the provider's list of payments "+
				"https://dashboard.provider.example/payments/pi_3QxLongPaymentIdentifier%02dAbCdEfGhIjKlMnOp?account=acct_1PayreconOperations "+
				"with metadata order=ORD-2026-000%02d-EU and a description that goes on for a while, as evidence does", "pur_unknown_0000000000"+fmt.Sprint(i), i, i),
			FoundAt: f.clock.Now(),
		}
		if i < 2 {
			fd.Kind, fd.PurchaseID = reconcile.FindingDuplicateCharge, escalated[0].ID
		}
		if err := f.store.InTx(ctx, func(tx reconcile.Tx) error {
			_, err := tx.InsertFinding(ctx, fd)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.svc.LiveView(ctx, escalated[0].ID); err != nil {
		t.Fatal(err)
	}
	findings, err := f.svc.Findings(ctx, reconcile.AnyAccount, false)
	if err != nil || len(findings) != 20 {
		t.Fatalf("findings: %d, %v", len(findings), err)
	}
	return []opsLayoutPage{
		{"list", "/ops"},
		{"findings", "/ops/findings?all=1"},
		{"outbox", "/ops/outbox"},
		{"case", "/ops/purchases/" + escalated[0].ID},
		{"finding", fmt.Sprintf("/ops/findings/%d", findings[0].ID)},
	}
}

// browserBase is the server's address as the browser must use it:
// Chromium accepts Secure cookies over plain http only from localhost.
func (f *opsFixture) browserBase() string {
	return "http://localhost:" + f.srv.URL[strings.LastIndex(f.srv.URL, ":")+1:]
}

// opsBrowserSession starts a headless Chromium signed in to f's pages.
func opsBrowserSession(t *testing.T, f *opsFixture) context.Context {
	t.Helper()
	testCtx, cancelTest := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancelTest)
	out := &opsBrowserOutput{}
	allocCtx, cancelAlloc := opsChromiumAllocator(t, testCtx, out)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelBrowser()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v\nbrowser output:\n%s", err, out.String())
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx,
		chromedp.Navigate(f.browserBase()+"/ops/login"),
		chromedp.SendKeys(chromedp.ID("operator"), "Layout Checker"),
		chromedp.SendKeys(chromedp.ID("token"), opsToken),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("cases")),
	); err != nil {
		t.Fatalf("sign in: %v\nbrowser output:\n%s", err, out.String())
	}
	return ctx
}
