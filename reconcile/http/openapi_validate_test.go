package http_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/payrecon/payrecon/api"
	"github.com/payrecon/payrecon/provider"
)

// The contract checks: every request the purchase API tests send and every
// response they get is checked against api/openapi.yaml, so that the
// document cannot drift from the code.
//
// A response must be one the document lists for the operation, with its
// status, headers and body schema. A request is judged by the document
// too, and by the rules its description gives in words because JSON
// Schema cannot say them (bodyRules); the server's answer must agree: a
// request the contract refuses gets 400, 401 or 413, and one it accepts
// never gets 400 or 413.

// maxBody is the document's limit on a purchase request body.
const maxBody = 16384

var (
	contractOnce sync.Once
	contractV    validator.Validator
	contractErr  error
	// contractMu serialises validations: the validator's caches are
	// shared, and the tests post concurrently.
	contractMu sync.Mutex
)

// contract returns the validator of api/openapi.yaml, built once per test
// binary. It checks formats (date-time) too.
func contract(t testing.TB) validator.Validator {
	t.Helper()
	contractOnce.Do(func() {
		doc, err := libopenapi.NewDocument(api.OpenAPI)
		if err != nil {
			contractErr = fmt.Errorf("parse api/openapi.yaml: %w", err)
			return
		}
		v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
		if len(errs) > 0 {
			contractErr = fmt.Errorf("build the validator of api/openapi.yaml: %w", errors.Join(errs...))
			return
		}
		contractV = v
	})
	if contractErr != nil {
		t.Fatal(contractErr)
	}
	return contractV
}

// checkContract makes srv's client check every exchange against
// api/openapi.yaml (contractTransport), failing t on any violation.
func checkContract(t testing.TB, srv *httptest.Server) {
	t.Helper()
	c := srv.Client()
	c.Transport = &contractTransport{t: t, v: contract(t), next: c.Transport}
}

// contractTransport is an http.RoundTripper that checks each request it
// sends and each response it receives against api/openapi.yaml, and fails
// the test on any violation (it does not stop the test: Errorf).
type contractTransport struct {
	t    testing.TB
	v    validator.Validator
	next http.RoundTripper
}

func (c *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err // no answer to check (a test that drops the connection)
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	for _, v := range judgeExchange(c.v, req, body, resp.StatusCode, resp.Header, respBody) {
		c.t.Errorf("api/openapi.yaml: %s", v)
	}
	return resp, nil
}

// judgeExchange returns every way in which one exchange breaks the
// contract: the request sent with body, answered with status, header and
// respBody.
func judgeExchange(v validator.Validator, req *http.Request, body []byte, status int, header http.Header, respBody []byte) []string {
	what := fmt.Sprintf("%s %s (body %.200q) → %d (body %.300q)", req.Method, req.URL.Path, body, status, respBody)
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	vresp := &http.Response{
		StatusCode: status, Header: header.Clone(), Request: vreq,
		Body: io.NopCloser(bytes.NewReader(respBody)),
	}
	var broken []string
	if req.Method == http.MethodPost && (req.URL.Path == "/v1/purchases" || refundsPath.MatchString(req.URL.Path)) {
		broken = bodyRules(body)
	}
	if req.Method == http.MethodPost && req.URL.Path == "/v1/purchases" {
		broken = append(broken, minimumChargeRule(body)...)
	}
	contractMu.Lock()
	if len(body) <= maxBody { // a larger body is refused whatever it says
		if ok, errs := v.ValidateHttpRequestSync(vreq); !ok {
			broken = append(broken, describe(errs))
		}
		vreq.Body = io.NopCloser(bytes.NewReader(body))
	}
	respOK, respErrs := v.ValidateHttpResponse(vreq, vresp)
	contractMu.Unlock()

	var out []string
	if !respOK {
		out = append(out, fmt.Sprintf("%s: the response breaks the contract: %s", what, describe(respErrs)))
	}
	refused := len(broken) > 0
	switch {
	case refused && status != http.StatusBadRequest && status != http.StatusUnauthorized && status != http.StatusRequestEntityTooLarge:
		out = append(out, fmt.Sprintf("%s: the contract refuses the request (%s), the server answered %d, want 400, 401 or 413",
			what, strings.Join(broken, "; "), status))
	case !refused && (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge):
		out = append(out, fmt.Sprintf("%s: the server refused a request the contract accepts", what))
	}
	return out
}

// minimumChargeRule returns the rule of amount's description that a
// purchase body breaks and that JSON Schema cannot express: an amount
// under the provider's minimum charge in its currency.
func minimumChargeRule(body []byte) []string {
	var req struct {
		Amount   json.Number `json:"amount"`
		Currency string      `json:"currency"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil // left to the schema
	}
	amount, err := req.Amount.Int64()
	least, fixed := provider.MinimumCharge(strings.ToLower(strings.TrimSpace(req.Currency)))
	if err != nil || !fixed || amount < 1 || amount >= least {
		return nil
	}
	return []string{fmt.Sprintf("amount %d is under the minimum charge of %d in %s", amount, least, req.Currency)}
}

// refundsPath is the path of POST /v1/purchases/{id}/refunds, whose body
// follows the same rules as a purchase's.
var refundsPath = regexp.MustCompile(`^/v1/purchases/[^/]+/refunds$`)

// integerLiteral is how the contract wants amount written.
var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// bodyRules returns the rules of the document's description that a
// purchase or refund request body breaks and that JSON Schema cannot express: its
// size, UTF-8 without lone surrogates, one JSON value with no member name
// twice in an object, amount as an integer literal. A body that is not
// JSON is left to the schema.
func bodyRules(body []byte) []string {
	var broken []string
	if len(body) > maxBody {
		broken = append(broken, fmt.Sprintf("the body has %d bytes, over %d", len(body), maxBody))
	}
	if !utf8.Valid(body) {
		broken = append(broken, "the body is not valid UTF-8")
	}
	if !json.Valid(body) {
		return append(broken, "the body is not one JSON value")
	}
	if hasLoneSurrogate(body) {
		broken = append(broken, "the body has an escaped lone surrogate")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		keys    map[string]bool // nil in an array
		wantKey bool
		key     string // the member whose value comes next
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			break // the end: body is valid JSON
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
				continue
			case '[':
				stack = append(stack, &frame{})
				continue
			}
			stack = stack[:len(stack)-1]
		case string:
			if top != nil && top.keys != nil && top.wantKey {
				if top.keys[tok] {
					broken = append(broken, fmt.Sprintf("member %q appears twice in an object", tok))
				}
				top.keys[tok], top.wantKey, top.key = true, false, tok
				continue
			}
		case json.Number:
			if len(stack) == 1 && top.keys != nil && top.key == "amount" && !integerLiteral.MatchString(string(tok)) {
				broken = append(broken, fmt.Sprintf("amount %s is not an integer literal", tok))
			}
		}
		if len(stack) > 0 && stack[len(stack)-1].keys != nil {
			stack[len(stack)-1].wantKey = true
		}
	}
	return broken
}

// hasLoneSurrogate reports whether the JSON text body has a \u escape of
// a UTF-16 surrogate that is not half of a pair. Decoding the strings
// would not tell: encoding/json turns a lone surrogate into U+FFFD, as it
// does the escape \ufffd itself.
func hasLoneSurrogate(body []byte) bool {
	inString := false
	for i := 0; i < len(body); i++ {
		switch b := body[i]; {
		case b == '"':
			inString = !inString
		case b == '\\' && inString:
			if i+1 < len(body) && body[i+1] != 'u' {
				i++ // a one-character escape
				continue
			}
			r := hex4(body, i)
			i += 5
			if r < 0 || !utf16.IsSurrogate(rune(r)) {
				continue
			}
			if lo := hex4(body, i+1); r < 0xdc00 && lo >= 0xdc00 && lo <= 0xdfff {
				i += 6
				continue
			}
			return true
		}
	}
	return false
}

// hex4 returns the code unit of the \uXXXX escape at body[i:], or -1.
func hex4(body []byte, i int) int {
	if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
		return -1
	}
	n, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// describe renders a validator's errors on one line.
func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			s += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			s += fmt.Sprintf(" [%s at %s]", f.Reason, f.FieldPath)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
