package api_test

import (
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/payrecon/payrecon/api"
)

// TestOpenAPIIsValid: the embedded document is OpenAPI 3.1, builds into a
// model without errors, and passes the OpenAPI 3.1 schema.
func TestOpenAPIIsValid(t *testing.T) {
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	if err != nil {
		t.Fatalf("parse api/openapi.yaml: %v", err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("api/openapi.yaml is OpenAPI %s, want 3.1", v)
	}
	if _, err := doc.BuildV3Model(); err != nil {
		t.Fatalf("build the model of api/openapi.yaml: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("api/openapi.yaml: %s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s (at %s, keyword %s)", se.Reason, se.FieldPath, se.KeywordLocation)
			}
		}
	}
}
