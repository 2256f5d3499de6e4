package http

import (
	"net/http"

	"github.com/payrecon/payrecon/api"
)

// openAPIRoute is where the purchase API serves its own contract.
const openAPIRoute = "GET /v1/openapi.yaml"

// serveOpenAPI answers with api.OpenAPI, the OpenAPI 3.1 document of the
// purchase API, as application/yaml (RFC 9512). It needs no token: the
// document is public and says nothing about any purchase. It is served
// with the API (PurchaseAPI.Register), so a server without the API does
// not describe one.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", api.OpenAPIContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(api.OpenAPI) // the client went away; nothing to do
}
