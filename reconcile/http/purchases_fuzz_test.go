package http_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// newSQLiteAPI returns a server with the purchase API (clients shop and
// billing) over a migrated SQLite store in a temporary directory: no
// PostgreSQL needed, and fast enough to fuzz.
func newSQLiteAPI(tb testing.TB) (*rhttp.Server, reconcile.Store) {
	tb.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(tb.TempDir(), "api.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), reconcile.Config{Logger: discardLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	clients, err := rhttp.ParseAPITokens("shop:" + shopToken + ",billing:" + billingToken)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := rhttp.NewPurchaseAPI(svc, clients)
	if err != nil {
		tb.Fatal(err)
	}
	s := rhttp.New(svc, rhttp.Config{Logger: discardLogger()})
	a.Register(s)
	return s, st
}

// sqliteAPI is newSQLiteAPI's server.
func sqliteAPI(tb testing.TB) http.Handler {
	s, _ := newSQLiteAPI(tb)
	return s
}

// countPurchases counts the purchases in st.
func countPurchases(tb testing.TB, st reconcile.Store) int {
	tb.Helper()
	total := 0
	err := st.InTx(context.Background(), func(tx reconcile.Tx) error {
		counts, err := tx.CountByState(context.Background())
		for _, n := range counts {
			total += n
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return total
}

// FuzzCreatePurchase feeds each body to the real POST /v1/purchases
// handler, with a valid token and a valid key (one per body, derived from
// it, so that every new body is a first attempt and a body met again a
// replay). Properties:
//
//   - never a 5xx: a body, however bad, is the client's error;
//   - a 4xx stores no purchase; a 201 stores exactly one, or none when it
//     is a replay;
//   - a 201 only for a body whose fields pass validation, and a 400 or
//     413 only for one that does not: "validation" being api/openapi.yaml,
//     its schema and the rules its text gives (judgeExchange), so the
//     document is fuzzed as well as the code;
//   - every answer is one the document describes.
func FuzzCreatePurchase(f *testing.F) {
	for _, seed := range []string{
		coffee,
		`{"customer":"cus-7","amount":300,"currency":"usd"}`,
		`{"customer":" c ","amount":1,"currency":" USD ","description":null,"payment_method":"","reference":"r-1"}`,
		`{"customer":"c","amount":99999999,"currency":"jpy","description":"` + strings.Repeat("d", 1000) + `"}`,
		`{"customer":"c","amount":100000000,"currency":"usd"}`,
		`{"customer":"c","amount":0,"currency":"usd"}`,
		`{"customer":"c","amount":300.0,"currency":"usd"}`,
		`{"customer":"c","amount":3e2,"currency":"usd"}`,
		`{"customer":"c","amount":"300","currency":"usd"}`,
		`{"customer":"c","currency":"usd"}`,
		`{"customer":"c","amount":1,"amount":300,"currency":"usd"}`,
		`{"customer":"c","Amount":300,"currency":"usd"}`,
		`{"customer":"c","amount":300,"currency":"usd","tip":5}`,
		`{"customer":"c","amount":300,"currency":"usd","metadata":{"a":1,"a":2}}`,
		`{"customer":"c\ud800","amount":300,"currency":"usd"}`,
		`{"customer":"c\ud83d\ude00","amount":300,"currency":"usd"}`,
		"{\"customer\":\"c\xff\",\"amount\":300,\"currency\":\"usd\"}",
		`{"customer":"a\u0000b","amount":300,"currency":"usd"}`,
		`{"customer":"\u3000c\u3000","amount":300,"currency":"DK\u212a"}`,
		`{"customer":"c","amount":300,"currency":"usd"}{}`,
		`{"customer":"c","amount":300,"currency":"usd"} `,
		`{"customer":`,
		`null`,
		`[]`,
		``,
		`{"customer":"` + strings.Repeat("x", 17000) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	s, st := newSQLiteAPI(f)
	v := contract(f)
	stored := countPurchases(f, st)
	f.Fuzz(func(t *testing.T, body []byte) {
		sum := sha256.Sum256(body)
		req := httptest.NewRequest("POST", "/v1/purchases", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+shopToken)
		req.Header.Set("Idempotency-Key", "fuzz-"+hex.EncodeToString(sum[:16]))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)

		now := countPurchases(t, st)
		created, replayed := now-stored, rec.Header().Get("Idempotent-Replayed") == "true"
		stored = now
		switch status := rec.Code; {
		case status >= 500:
			t.Fatalf("%d for body %q: %s", status, body, rec.Body)
		case status >= 400 && created != 0:
			t.Fatalf("%d for body %q stored %d purchases: %s", status, body, created, rec.Body)
		case status == http.StatusCreated && !replayed && created != 1:
			t.Fatalf("201 for body %q stored %d purchases, want 1", body, created)
		case status == http.StatusCreated && replayed && created != 0:
			t.Fatalf("replayed 201 for body %q stored %d purchases, want 0", body, created)
		case status == http.StatusCreated:
			var p rhttp.PurchaseJSON
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.ID == "" {
				t.Fatalf("201 for body %q: %s: %v", body, rec.Body, err)
			}
		}
		if broken := judgeExchange(v, req, body, rec.Code, rec.Header(), rec.Body.Bytes()); len(broken) > 0 {
			t.Fatalf("api/openapi.yaml: %s", strings.Join(broken, "\n"))
		}
	})
}
