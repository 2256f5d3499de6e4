// Package api holds payrecon's API contract: the OpenAPI 3.1 document of
// the purchase API, built into the binary so that `payrecon serve` serves
// the very document its tests validate every request and response
// against (reconcile/http).
package api

import _ "embed"

// OpenAPI is api/openapi.yaml, the OpenAPI 3.1 document of the purchase
// API, served at GET /v1/openapi.yaml. Read it; do not modify it.
//
//go:embed openapi.yaml
var OpenAPI []byte

// OpenAPIContentType is the media type OpenAPI is served with: YAML, as
// registered by RFC 9512.
const OpenAPIContentType = "application/yaml"
