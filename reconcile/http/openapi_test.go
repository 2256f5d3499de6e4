package http_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/payrecon/payrecon/api"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// openAPIModel returns the model of api/openapi.yaml.
func openAPIModel(t *testing.T, doc []byte) *v3.Document {
	t.Helper()
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatalf("parse the document: %v", err)
	}
	if v := d.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("the document is OpenAPI %q, want 3.1", v)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		t.Fatalf("build the model: %v", err)
	}
	return &m.Model
}

// specOperations returns the document's operations as ServeMux patterns,
// "GET /v1/purchases/{id}".
func specOperations(m *v3.Document) []string {
	var ops []string
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// TestOpenAPIServed: GET /v1/openapi.yaml answers, without a token, the
// embedded document as application/yaml, and it is OpenAPI 3.1.
func TestOpenAPIServed(t *testing.T) {
	srv := httptest.NewServer(sqliteAPI(t))
	t.Cleanup(srv.Close)
	checkContract(t, srv)
	resp, err := srv.Client().Get(srv.URL + "/v1/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != api.OpenAPIContentType {
		t.Errorf("Content-Type %q, want %q", ct, api.OpenAPIContentType)
	}
	if ns := resp.Header.Get("X-Content-Type-Options"); ns != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", ns)
	}
	if !bytes.Equal(body, api.OpenAPI) {
		t.Fatal("the served document is not api.OpenAPI")
	}
	if ok, errs := contract(t).ValidateDocument(); !ok {
		t.Fatalf("the document breaks the OpenAPI 3.1 schema: %s", describe(errs))
	}
	openAPIModel(t, body)
}

// routeLiteral is a ServeMux pattern under /v1/ in the package's source.
var routeLiteral = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (/v1/\S*)$`)

// TestOpenAPICoversEveryRoute: the routes the package registers under
// /v1/ (every pattern literal in its source) are exactly the document's
// operations, and the server routes every operation of the document (its
// answer is not the ServeMux's own 404 or 405).
func TestOpenAPICoversEveryRoute(t *testing.T) {
	spec := specOperations(openAPIModel(t, api.OpenAPI))

	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && routeLiteral.MatchString(s) {
				registered = append(registered, s)
			}
			return true
		})
	}
	slices.Sort(registered)
	registered = slices.Compact(registered)
	if !slices.Equal(registered, spec) {
		t.Fatalf("routes under /v1/ in the source:\n  %s\noperations in api/openapi.yaml:\n  %s",
			strings.Join(registered, "\n  "), strings.Join(spec, "\n  "))
	}

	h := sqliteAPI(t)
	for _, op := range spec {
		method, path, _ := strings.Cut(op, " ")
		req := httptest.NewRequest(method, strings.ReplaceAll(path, "{id}", "pur_0"), strings.NewReader("{}"))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusMethodNotAllowed ||
			rec.Code == http.StatusNotFound && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Errorf("%s: the server does not route it: %d %s", op, rec.Code, rec.Body)
		}
	}
}

// propertyOf returns what the tests read of a property of a component
// schema.
func propertyOf(t *testing.T, m *v3.Document, schema, property string) *v3SchemaView {
	t.Helper()
	sp := m.Components.Schemas.GetOrZero(schema)
	if sp == nil {
		t.Fatalf("no schema %s", schema)
	}
	pp := sp.Schema().Properties.GetOrZero(property)
	if pp == nil {
		t.Fatalf("schema %s has no property %s", schema, property)
	}
	s := pp.Schema()
	v := &v3SchemaView{pattern: s.Pattern, description: s.Description}
	if s.Maximum != nil {
		v.maximum = *s.Maximum
	}
	for _, e := range s.Enum {
		v.enum = append(v.enum, e.Value)
	}
	return v
}

type v3SchemaView struct {
	pattern     string
	description string
	maximum     float64
	enum        []string
}

// TestOpenAPIMatchesTheDomain: the document's lists and limits are the
// code's: the currencies (every three-letter code, in both cases), the
// default maximum amount of a purchase and of a refund, the states of
// both machines.
func TestOpenAPIMatchesTheDomain(t *testing.T) {
	m := openAPIModel(t, api.OpenAPI)
	currency := regexp.MustCompile(propertyOf(t, m, "PurchaseRequest", "currency").pattern)
	for a := 'a'; a <= 'z'; a++ {
		for b := 'a'; b <= 'z'; b++ {
			for c := 'a'; c <= 'z'; c++ {
				code := string([]rune{a, b, c})
				want := reconcile.SupportedCurrency(code)
				for _, sent := range []string{code, strings.ToUpper(code), " " + code + "\t"} {
					if got := currency.MatchString(sent); got != want {
						t.Errorf("currency %q: the document's pattern says %v, SupportedCurrency(%q) %v", sent, got, code, want)
					}
				}
			}
		}
	}
	for _, schema := range []string{"PurchaseRequest", "RefundRequest"} {
		if got, want := propertyOf(t, m, schema, "amount").maximum, float64(reconcile.DefaultConfig().MaxAmount); got != want {
			t.Errorf("%s amount maximum %v, want reconcile's default MaxAmount %v", schema, got, want)
		}
	}
	// The minimum charges the amount's description lists ("50 for usd,
	// eur; 30 for gbp; …") are the provider's, every one of them.
	minimums := map[string]int64{}
	desc := strings.Join(strings.Fields(propertyOf(t, m, "PurchaseRequest", "amount").description), " ")
	for _, g := range regexp.MustCompile(`(\d+) for ([a-z, and]+?)[;)]`).FindAllStringSubmatch(desc, -1) {
		n, _ := strconv.ParseInt(g[1], 10, 64)
		for _, c := range regexp.MustCompile(`[a-z]{3}`).FindAllString(g[2], -1) {
			if c != "and" {
				minimums[c] = n
			}
		}
	}
	for _, c := range []string{"usd", "eur", "gbp", "jpy", "huf"} {
		if _, ok := minimums[c]; !ok {
			t.Errorf("the amount's description gives no minimum charge for %s: %q", c, desc)
		}
	}
	for c, n := range minimums {
		if least, ok := provider.MinimumCharge(c); !ok || least != n {
			t.Errorf("the amount's description says the minimum charge in %s is %d; provider.MinimumCharge says %d, %v", c, n, least, ok)
		}
	}
	for _, c := range strings.Fields("aud bgn brl cad chf cny czk dkk eur gbp hkd huf idr ils inr isk jpy krw mxn myr nok nzd php pln ron sek sgd thb try usd zar aed") {
		if _, ok := provider.MinimumCharge(c); ok && minimums[c] == 0 {
			t.Errorf("provider.MinimumCharge fixes a minimum in %s; the amount's description does not say it", c)
		}
	}
	for schema, machine := range map[string]statemachine.Machine{"State": statemachine.Purchase, "RefundState": statemachine.Refund} {
		states := machine.States()
		if got := m.Components.Schemas.GetOrZero(schema).Schema().Enum; len(got) != len(states) {
			t.Errorf("%s has %d values, statemachine.%s %d", schema, len(got), machine.Name(), len(states))
		} else {
			for i, n := range got {
				if n.Value != string(states[i]) {
					t.Errorf("%s[%d] = %q, want %q", schema, i, n.Value, states[i])
				}
			}
		}
	}
}

// TestOpenAPITextFields: the document's patterns for the text fields say
// what reconcile's Validate does with them (trimmed, counted in
// characters, no control characters), tried on one field value at a time
// through the real handler, whose every answer the contract checks.
func TestOpenAPITextFields(t *testing.T) {
	srv := httptest.NewServer(sqliteAPI(t))
	t.Cleanup(srv.Close)
	checkContract(t, srv)
	long := func(n int) string { return strings.Repeat("é", n) }
	values := []string{
		"", " ", "\t\n", "\u3000", "x", " x ", "\u00a0x\u2028", "a b", "a\tb", "a\u007fb", "a\u0085b",
		"\u0085", long(255), long(256), " " + long(255) + " ", long(254) + "\u3000x",
		"x\u0000", strings.Repeat(" ", 300) + "x", "\U0001F600", strings.Repeat("\U0001F600", 255),
	}
	n := 0
	for _, field := range []string{"customer", "reference", "payment_method", "description"} {
		for _, v := range values {
			n++
			p := map[string]any{"customer": "c", "amount": 300, "currency": "usd", "reference": "r" + strconv.Itoa(n)}
			p[field] = v
			postJSON(t, srv, "text-"+strconv.Itoa(n), p)
		}
	}
	for i, c := range []any{"usd", "USD", " Usd ", "\u3000eur\u3000", "DK\u212a", "\u0130sk", "usdx", "us", "", nil, 840} {
		postJSON(t, srv, "cur-"+strconv.Itoa(i), map[string]any{"customer": "c", "amount": 300, "currency": c})
	}
	for i, a := range []string{"1", "99999999", "100000000", "0", "-1", "300.0", "3e2", "1.5", `"300"`, "null", "9223372036854775808"} {
		body := `{"customer":"c","currency":"usd","amount":` + a + `}`
		postRaw(t, srv, "amt-"+strconv.Itoa(i), body)
	}
}

func postJSON(t *testing.T, srv *httptest.Server, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	postRaw(t, srv, key, string(b))
}

func postRaw(t *testing.T, srv *httptest.Server, key, body string) {
	t.Helper()
	req, err := http.NewRequest("POST", srv.URL+"/v1/purchases", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+shopToken)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestContractCatchesDrift: the contract check itself finds a response
// the document does not describe and a disagreement on a request.
func TestContractCatchesDrift(t *testing.T) {
	v := contract(t)
	post := func(body string) *http.Request {
		r := httptest.NewRequest("POST", "/v1/purchases", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+shopToken)
		r.Header.Set("Idempotency-Key", "k")
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	jsonHeader := func(extra ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	const purchase = `{"id":"pur_0123456789abcdef01234567","state":"created","customer":"cus-7","amount":300,"currency":"usd",` +
		`"description":"coffee","created_at":"2026-03-01T09:00:00Z","updated_at":"2026-03-01T09:00:00Z"}`
	created := jsonHeader("Location", "/v1/purchases/pur_0123456789abcdef01234567")
	const invalid = `{"error":{"code":"invalid_request","message":"amount: is required","fields":[{"field":"amount","message":"is required"}]}}`
	tests := []struct {
		name     string
		body     string
		status   int
		header   http.Header
		respBody string
		wantOK   bool
	}{
		{"a purchase created", coffee, 201, created, purchase, true},
		{"a field the document lacks", coffee, 201, created, strings.Replace(purchase, `"state"`, `"tip":1,"state"`, 1), false},
		{"a state the document lacks", coffee, 201, created, strings.Replace(purchase, `"created"`, `"refunded"`, 1), false},
		{"no Location", coffee, 201, jsonHeader(), purchase, false},
		{"an undocumented status", coffee, 418, jsonHeader(), `{"error":{"code":"teapot","message":"no"}}`, false},
		{"another error code", coffee, 422, jsonHeader(), `{"error":{"code":"conflict","message":"no"}}`, false},
		{"a valid body refused", coffee, 400, jsonHeader(), invalid, false},
		{"an invalid body refused", `{"customer":"c","currency":"usd"}`, 400, jsonHeader(), invalid, true},
		{"an invalid body accepted", `{"customer":"c","currency":"usd"}`, 201, created, purchase, false},
		{"a duplicate key accepted", `{"customer":"c","amount":1,"amount":300,"currency":"usd"}`, 201, created, purchase, false},
		{"a case-folded key accepted", `{"customer":"c","Amount":300,"currency":"usd"}`, 201, created, purchase, false},
		{"a lone surrogate accepted", `{"customer":"c\ud800","amount":300,"currency":"usd"}`, 201, created, purchase, false},
		{"an amount 300.0 accepted", `{"customer":"c","amount":300.0,"currency":"usd"}`, 201, created, purchase, false},
		{"a body too large refused", `{"customer":"` + strings.Repeat("x", maxBody) + `"}`, 413, jsonHeader(),
			`{"error":{"code":"too_large","message":"the body is larger than 16384 bytes"}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judgeExchange(v, post(tt.body), []byte(tt.body), tt.status, tt.header, []byte(tt.respBody))
			if ok := len(got) == 0; ok != tt.wantOK {
				t.Fatalf("violations %q; want ok %v", got, tt.wantOK)
			}
		})
	}
}
