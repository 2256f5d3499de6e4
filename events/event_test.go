package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// validEvent returns a valid event with data {"amount":4900}.
func validEvent(t *testing.T) Event {
	t.Helper()
	e := Event{
		ID:            "evt_1",
		Type:          PurchaseSucceeded,
		SchemaVersion: SchemaVersion,
		PurchaseID:    "pur_1",
		Sequence:      1,
		CreatedAt:     time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
	if err := e.SetData(map[string]any{"amount": 4900}); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestDigestIgnoresInsignificantWhitespaceOnly(t *testing.T) {
	a, err := Digest([]byte(`{"a":1,"b":"x y"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Digest([]byte("{ \"a\" : 1,\n \"b\" : \"x y\" }"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("whitespace changed the digest: %s vs %s", a, b)
	}
	// The SHA-256 of the compact bytes, hex.
	sum := sha256.Sum256([]byte(`{"a":1,"b":"x y"}`))
	if want := hex.EncodeToString(sum[:]); a != want {
		t.Errorf("Digest = %s, want %s", a, want)
	}
	for _, other := range []string{`{"a":1,"b":"x  y"}`, `{"b":"x y","a":1}`, `{"a":2,"b":"x y"}`} {
		d, err := Digest([]byte(other))
		if err != nil {
			t.Fatal(err)
		}
		if d == a {
			t.Errorf("Digest(%s) equals Digest of a different payload", other)
		}
	}
	if _, err := Digest([]byte(`{"a":`)); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("Digest of broken JSON: %v, want ErrInvalidEvent", err)
	}
}

func TestSetDataCompactsAndKeepsHTML(t *testing.T) {
	var e Event
	if err := e.SetData(json.RawMessage("{ \"note\" : \"<b>&</b>\" }")); err != nil {
		t.Fatal(err)
	}
	if got, want := string(e.Data), `{"note":"<b>&</b>"}`; got != want {
		t.Errorf("Data = %s, want %s", got, want)
	}
	if d, _ := Digest(e.Data); d != e.Digest {
		t.Errorf("Digest = %s, want %s", e.Digest, d)
	}
	for _, bad := range []any{json.RawMessage(`[1]`), json.RawMessage(`{`), "text", make(chan int)} {
		if err := e.SetData(bad); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("SetData(%v): %v, want ErrInvalidEvent", bad, err)
		}
	}
}

func TestMarshalIsStableAndRoundTrips(t *testing.T) {
	e := validEvent(t)
	if err := e.SetData(map[string]any{"note": "<b>&</b>", "amount": 4900}); err != nil {
		t.Fatal(err)
	}
	body, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"evt_1","type":"purchase.succeeded","schema_version":1,"purchase_id":"pur_1","sequence":1,"created_at":"2026-03-01T12:00:00Z","data":{"amount":4900,"note":"<b>&</b>"},"digest":"` + e.Digest + `"}`
	if string(body) != want {
		t.Errorf("Marshal:\n got %s\nwant %s", body, want)
	}
	again, err := Marshal(e)
	if err != nil || string(again) != string(body) {
		t.Errorf("Marshal again: %s, %v; want the same bytes", again, err)
	}
	got, err := Unmarshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Type != e.Type || got.Sequence != e.Sequence || !got.CreatedAt.Equal(e.CreatedAt) || string(got.Data) != string(e.Data) || got.Digest != e.Digest {
		t.Errorf("Unmarshal(Marshal(e)) = %+v, want %+v", got, e)
	}
	// Unknown fields are ignored; a refund id is carried.
	e.RefundID = "ref_1"
	e.Type = RefundSucceeded
	body, err = Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), `{"id"`, `{"future":true,"id"`, 1))
	if got, err := Unmarshal(body); err != nil || got.RefundID != "ref_1" {
		t.Errorf("Unmarshal with an unknown field: %+v, %v", got, err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Event)
		want   error
	}{
		{"valid", func(*Event) {}, nil},
		{"no id", func(e *Event) { e.ID = "" }, ErrInvalidEvent},
		{"no type", func(e *Event) { e.Type = "" }, ErrInvalidEvent},
		{"unknown type is fine", func(e *Event) { e.Type = "purchase.renamed" }, nil},
		{"schema version 0", func(e *Event) { e.SchemaVersion = 0 }, ErrInvalidEvent},
		{"schema version from the future", func(e *Event) { e.SchemaVersion = SchemaVersion + 1 }, ErrInvalidEvent},
		{"no purchase", func(e *Event) { e.PurchaseID = "" }, ErrInvalidEvent},
		{"sequence 0", func(e *Event) { e.Sequence = 0 }, ErrInvalidEvent},
		{"no created_at", func(e *Event) { e.CreatedAt = time.Time{} }, ErrInvalidEvent},
		{"no data", func(e *Event) { e.Data = nil }, ErrInvalidEvent},
		{"data not an object", func(e *Event) { e.Data = json.RawMessage(`"x"`) }, ErrInvalidEvent},
		{"data changed", func(e *Event) { e.Data = json.RawMessage(`{"amount":1}`) }, ErrDigestMismatch},
		{"data reformatted", func(e *Event) { e.Data = json.RawMessage(`{ "amount": 4900 }`) }, nil},
		{"digest changed", func(e *Event) { e.Digest = strings.Repeat("0", 64) }, ErrDigestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEvent(t)
			tc.change(&e)
			err := e.Validate()
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Validate: %v, want %v", err, tc.want)
			}
			if _, merr := Marshal(e); (merr == nil) != (err == nil) {
				t.Errorf("Marshal: %v, but Validate: %v", merr, err)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if a == b || !strings.HasPrefix(a, "evt_") || len(a) != len("evt_")+32 {
		t.Errorf("NewID: %q, %q", a, b)
	}
}
