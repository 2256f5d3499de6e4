package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"

	"github.com/payrecon/payrecon/provider"
)

// maxEventTypes is the most types Stripe accepts in one event listing
// (types[]).
const maxEventTypes = 20

// eventPage is a page of GET /v1/events, each event kept as its JSON, so
// that it is translated, and digested, exactly as a webhook's payload.
type eventPage struct {
	stripego.APIResource
	Data    []json.RawMessage `json:"data"`
	HasMore bool              `json:"has_more"`
}

// ListEvents implements provider.Provider with one GET /v1/events:
// created[gte] Since (in Unix seconds, rounded down), types[] q.Types (or
// type, for a single one; provider.EventTypes when empty), limit, and
// starting_after q.After. Stripe lists its events newest first and keeps
// them 30 days.
//
// Each event is translated as Verify translates a webhook carrying it
// (translateEvent, for an endpoint of DefaultWebhookAPIVersion, the
// version stripe-go asks its API for): same fields, same Digest, which
// covers the event's id, type, creation time and object but not its
// envelope, so that the listed event and its webhook are one event to the
// inbox. Payload is the event's JSON. An event Verify would refuse
// (ErrMalformedEvent, ErrAPIVersion) is in Refused,
// not in Events, and does not fail the page.
//
// Before sending, a zero Since or one before the Unix epoch, a Limit
// outside [0, provider.MaxEventPage], and more than 20 types are refused
// (ErrRejected). A failure of the call is translated as for the other
// calls (see translate); a page that is not JSON is an unknown outcome.
func (p *Provider) ListEvents(ctx context.Context, q provider.EventQuery) (provider.EventPage, error) {
	where := fmt.Sprintf("list events created since %s", formatBound(q.Since))
	types := q.Types
	if len(types) == 0 {
		types = provider.EventTypes
	}
	switch {
	case q.Since.IsZero() || q.Since.Before(time.Unix(0, 0)):
		return provider.EventPage{}, fmt.Errorf("stripe: %s: no bound, or one before the Unix epoch: %w", where, ErrRejected)
	case q.Limit < 0 || q.Limit > provider.MaxEventPage:
		return provider.EventPage{}, fmt.Errorf("stripe: %s: limit %d outside [0, %d]: %w", where, q.Limit, provider.MaxEventPage, ErrRejected)
	case len(types) > maxEventTypes:
		return provider.EventPage{}, fmt.Errorf("stripe: %s: %d types, Stripe takes at most %d: %w", where, len(types), maxEventTypes, ErrRejected)
	}
	if err := ctx.Err(); err != nil {
		return provider.EventPage{}, notSentYet(where, err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = provider.MaxEventPage
	}
	params := &stripego.EventListParams{
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: q.Since.Unix()},
	}
	params.Context = ctx
	params.Limit = stripego.Int64(int64(limit))
	p.on(params)
	if q.After != "" {
		params.StartingAfter = stripego.String(q.After)
	}
	if len(types) == 1 {
		params.Type = stripego.String(types[0])
	} else {
		params.Types = stripego.StringSlice(types)
	}
	body := &form.Values{}
	form.AppendTo(body, params)
	var page eventPage
	if err := p.api.CallRaw(http.MethodGet, "/v1/events", p.key, []byte(body.Encode()), params.GetParams(), &page); err != nil {
		return provider.EventPage{}, listErrorOf(provider.OpEventList, where, err)
	}
	out := provider.EventPage{HasMore: page.HasMore}
	for _, raw := range page.Data {
		var head struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &head); err != nil || head.ID == "" {
			return provider.EventPage{}, fmt.Errorf("stripe: %s: an event of the page has no id, so the next page cannot be asked for: outcome unknown", where)
		}
		out.Next = head.ID
		ev, err := translateEvent(raw, DefaultWebhookAPIVersion)
		if err != nil {
			if !refusable(err) {
				return provider.EventPage{}, fmt.Errorf("stripe: %s: %w", where, err)
			}
			out.Refused = append(out.Refused, provider.RefusedEvent{ID: head.ID, Type: head.Type, Err: err})
			continue
		}
		ev.Payload = string(raw)
		out.Events = append(out.Events, ev)
	}
	return out, nil
}

// refusable reports whether err is one of translateEvent's refusals of
// an event, which a listing reports and goes past.
func refusable(err error) bool {
	return errors.Is(err, ErrMalformedEvent) || errors.Is(err, ErrAPIVersion)
}
