// Package apispec holds the OpenAPI 3.1 description of the merchant payments API.
package apispec

import _ "embed"

// YAML is the OpenAPI 3.1.0 document (openapi.yaml) describing the public HTTP
// API. The server returns it verbatim from GET /v1/openapi.yaml
// (Content-Type application/yaml); contract tests validate requests and
// responses against it (see package validate).
//
//go:embed openapi.yaml
var YAML []byte
