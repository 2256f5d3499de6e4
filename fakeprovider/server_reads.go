package fakeprovider

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/payrecon/payrecon/provider"
)

// GET /v1/payment_intents/{id}, /search and the list, in Stripe's wire
// format.

// retrieve serves GET /v1/payment_intents/{id} through Fake.Status, so
// that it settles, counts and reads stale as Status does.
func (s *Server) retrieve(w http.ResponseWriter, r *http.Request, id string) {
	if bad := onlyParams(r.URL.Query()); bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	res, err := s.fake.Status(r.Context(), id)
	if err != nil { // the client is gone
		dropConnection(w)
		return
	}
	c, ok := s.fake.charge(id)
	if res.Outcome == provider.NotFound || !ok {
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: "intent",
			DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such payment_intent: '%s'", id)})
		return
	}
	writeJSON(w, http.StatusOK, renderPI(c, res.Status))
}

// Limits of search, as Stripe's.
const (
	defaultSearchLimit = 10
	maxSearchLimit     = 100
)

// search serves GET /v1/payment_intents/search: the charges whose metadata
// matches, once Config.SearchLag has passed since their creation, newest
// first, limit a page, the next page's token in next_page.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if bad := onlyParams(q, "query", "limit", "page"); bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	key, value, ok := parseQuery(q.Get("query"))
	if !ok {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "query",
			Message: fmt.Sprintf("Invalid query %q: the fake provider understands only metadata['KEY']:'VALUE'", q.Get("query"))})
		return
	}
	limit, bad := parseLimit(q.Get("limit"), defaultSearchLimit, maxSearchLimit)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	offset := 0
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(v, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(v, "page_") {
			writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "page",
				Message: fmt.Sprintf("Invalid page %q", v)})
			return
		}
		offset = n
	}
	found, err := s.fake.searchCharges(r.Context(), key, value)
	if err != nil {
		dropConnection(w)
		return
	}
	page := []paymentIntent{}
	if offset < len(found) {
		for _, c := range found[offset:min(offset+limit, len(found))] {
			page = append(page, renderPI(c, c.Status))
		}
	}
	res := searchResult{Object: "search_result", URL: "/v1/payment_intents/search", Data: page}
	if next := offset + limit; next < len(found) {
		res.HasMore = true
		token := fmt.Sprintf("page_%d", next)
		res.NextPage = &token
	}
	writeJSON(w, http.StatusOK, res)
}

// parseLimit parses a limit parameter: def when empty, else an integer in
// [1, most].
func parseLimit(v string, def, most int) (int, *apiError) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: "limit",
			Message: fmt.Sprintf("Invalid limit %q: must be between 1 and %d", v, most)}
	}
	return n, nil
}

// Limits of list, as Stripe's.
const (
	defaultListLimit = 10
	maxListLimit     = 100
)

// createdBounds are the created filters of a list, with what each asks
// of a PaymentIntent's created (unix seconds) c given the value v.
var createdBounds = []struct {
	param string
	ok    func(c, v int64) bool
}{
	{"created", func(c, v int64) bool { return c == v }},
	{"created[gt]", func(c, v int64) bool { return c > v }},
	{"created[gte]", func(c, v int64) bool { return c >= v }},
	{"created[lt]", func(c, v int64) bool { return c < v }},
	{"created[lte]", func(c, v int64) bool { return c <= v }},
}

// list serves GET /v1/payment_intents (see Server).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	lq, bad := parseListQuery(r.URL.Query(), "payment_intent", s.fake.seqOf)
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	found, err := s.fake.listCharges(r.Context(), lq.keep)
	if err != nil { // the client is gone
		dropConnection(w)
		return
	}
	page, hasMore := pageOf(found, func(l listed) int { return l.seq }, lq)
	res := listResult{Object: "list", URL: "/v1/payment_intents", HasMore: hasMore, Data: []paymentIntent{}}
	for _, l := range page {
		res.Data = append(res.Data, renderPI(l.c, l.c.Status))
	}
	writeJSON(w, http.StatusOK, res)
}

// listQuery is a list request's filters and page: what the created
// filters accept, the limit, and the cursor.
type listQuery struct {
	// keep reports whether an object created at that unix second passes
	// the created filters.
	keep  func(created int64) bool
	limit int
	// after and before are the creation order (seq) of the
	// starting_after or ending_before object; 0 for none.
	after, before int
}

// parseListQuery reads a list request's query: the created filters,
// limit, starting_after and ending_before, and the parameters in extra,
// which the caller reads. A cursor is an id of object (its name in
// errors) that seqOf knows.
func parseListQuery(q url.Values, object string, seqOf func(id string) (int, bool), extra ...string) (listQuery, *apiError) {
	allowed := append([]string{"limit", "starting_after", "ending_before"}, extra...)
	for _, b := range createdBounds {
		allowed = append(allowed, b.param)
	}
	if bad := onlyParams(q, allowed...); bad != nil {
		return listQuery{}, bad
	}
	var checks []func(int64) bool
	for _, b := range createdBounds {
		if !q.Has(b.param) {
			continue
		}
		v, err := strconv.ParseInt(q.Get(b.param), 10, 64)
		if err != nil {
			return listQuery{}, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: b.param,
				Message: fmt.Sprintf("Invalid integer: %s", q.Get(b.param))}
		}
		checks = append(checks, func(c int64) bool { return b.ok(c, v) })
	}
	limit, bad := parseLimit(q.Get("limit"), defaultListLimit, maxListLimit)
	if bad != nil {
		return listQuery{}, bad
	}
	lq := listQuery{
		keep: func(created int64) bool {
			for _, ok := range checks {
				if !ok(created) {
					return false
				}
			}
			return true
		},
		limit: limit,
	}
	after, before := q.Get("starting_after"), q.Get("ending_before")
	if after != "" && before != "" {
		return listQuery{}, &apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "ending_before",
			Message: "You may only specify one of these parameters: starting_after, ending_before."}
	}
	for _, c := range []struct {
		param, id string
		seq       *int
	}{{"starting_after", after, &lq.after}, {"ending_before", before, &lq.before}} {
		if c.id == "" {
			continue
		}
		n, ok := seqOf(c.id)
		if !ok {
			return listQuery{}, &apiError{Type: "invalid_request_error", Code: ReasonNotFound, Param: c.param,
				DocURL: "https://stripe.com/docs/error-codes/resource-missing", Message: fmt.Sprintf("No such %s: '%s'", object, c.id)}
		}
		*c.seq = n
	}
	return lq, nil
}

// pageOf returns the page of found (newest first: seq decreasing) that lq
// asks for, and whether more lie beyond it in its direction.
func pageOf[T any](found []T, seq func(T) int, lq listQuery) ([]T, bool) {
	switch {
	case lq.after != 0:
		rest := found[sort.Search(len(found), func(i int) bool { return seq(found[i]) < lq.after }):]
		return rest[:min(lq.limit, len(rest))], len(rest) > lq.limit
	case lq.before != 0:
		newer := found[:sort.Search(len(found), func(i int) bool { return seq(found[i]) <= lq.before })]
		start := max(0, len(newer)-lq.limit)
		return newer[start:], start > 0
	}
	return found[:min(lq.limit, len(found))], len(found) > lq.limit
}

// parseQuery parses metadata['KEY']:'VALUE', with \' and \\ escapes in
// VALUE, as provider/stripe writes it.
func parseQuery(q string) (key, value string, ok bool) {
	rest, ok := strings.CutPrefix(q, "metadata['")
	if !ok {
		return "", "", false
	}
	key, rest, ok = strings.Cut(rest, "']:'")
	if !ok || key == "" || strings.ContainsAny(key, `'\`) {
		return "", "", false
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '\\':
			if i+1 == len(rest) {
				return "", "", false
			}
			i++
			b.WriteByte(rest[i])
		case '\'':
			if i != len(rest)-1 {
				return "", "", false
			}
			return key, b.String(), true
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false // no closing quote
}

// onlyParams returns a parameter_unknown error for a query parameter not
// in allowed.
func onlyParams(q url.Values, allowed ...string) *apiError {
	for name := range q {
		if !slices.Contains(allowed, name) {
			return &apiError{Type: "invalid_request_error", Code: "parameter_unknown", Param: name,
				Message: fmt.Sprintf("Received unknown parameter: %s", name)}
		}
	}
	return nil
}

// charge returns the charge id, as it is now (not settled).
func (f *Fake) charge(id string) (Charge, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byID[id]
	if e == nil {
		return Charge{}, false
	}
	return e.Charge, true
}

// searchCharges is Search for the HTTP front end: every charge whose
// metadata key has value and that search can see (Config.SearchLag),
// settled as of now, newest first. It counts as a Search call.
func (f *Fake) searchCharges(ctx context.Context, key, value string) ([]Charge, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpSearch]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := f.cfg.Now()
	var out []Charge
	for i := len(f.ledger) - 1; i >= 0; i-- {
		e := f.ledger[i]
		if now.Sub(e.CreatedAt) < f.cfg.SearchLag {
			continue
		}
		if v, ok := metadataOf(e.Charge)[key]; !ok || v != value {
			continue
		}
		f.settle(e, now)
		out = append(out, e.Charge)
	}
	return out, nil
}

// listed is a charge as the HTTP list finds it, with its place in
// creation order (entry.seq), the cursor of stable pages.
type listed struct {
	c   Charge
	seq int
}

// listCharges is List for the HTTP front end: every charge List can see
// (Config.ListLag) whose created unix second keep accepts, settled as of
// now, newest first. It counts as a List call.
func (f *Fake) listCharges(ctx context.Context, keep func(created int64) bool) ([]listed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpList]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := f.cfg.Now()
	var out []listed
	for i := len(f.ledger) - 1; i >= 0; i-- {
		e := f.ledger[i]
		if !f.listable(e.CreatedAt, now) || !keep(e.CreatedAt.Unix()) {
			continue
		}
		f.settle(e, now)
		out = append(out, listed{c: e.Charge, seq: e.seq})
	}
	return out, nil
}

// seqOf returns the place in creation order of the charge id.
func (f *Fake) seqOf(id string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byID[id]; e != nil {
		return e.seq, true
	}
	return 0, false
}
