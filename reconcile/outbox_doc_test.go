package reconcile

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/payrecon/payrecon/events"
)

// TestEventsREADMEDocumentsEveryPayload: events/README.md, the shop's
// reference, names every event type and every field of every payload the
// outbox writes, each in the table of its payload.
func TestEventsREADMEDocumentsEveryPayload(t *testing.T) {
	data, err := os.ReadFile("../events/README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, typ := range events.Types {
		if !strings.Contains(doc, "| `"+string(typ)+"` |") {
			t.Errorf("events/README.md has no row for the event type %s", typ)
		}
	}
	for heading, payload := range map[string]any{
		"### Purchase events": purchaseData{},
		"### Refund events":   refundData{},
		"### Finding events":  findingData{},
	} {
		_, section, ok := strings.Cut(doc, "\n"+heading+"\n")
		if !ok {
			t.Errorf("events/README.md has no section %q", heading)
			continue
		}
		section, _, _ = strings.Cut(section, "\n#")
		typ := reflect.TypeOf(payload)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(section, "| `"+name+"` |") {
				t.Errorf("events/README.md's %q has no row for the data field %s (%s.%s)", heading, name, typ.Name(), typ.Field(i).Name)
			}
		}
	}
}
