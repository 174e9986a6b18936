// Package validate checks real HTTP requests and responses against the
// OpenAPI 3.1 contract embedded in package apispec. It is meant for tests:
//
//	v, err := validate.New()
//	...
//	if err := v.Response(req, resp); err != nil {
//		t.Fatal(err) // lists every problem: message, reason, field, schema location
//	}
//
// It wraps github.com/pb33f/libopenapi-validator and adds what that library
// does not do on its own: an empty JSON body is a failure, and a request to a
// path or method that the contract does not describe (which the server answers
// with 404 endpoint_not_found) is validated against the shared error response
// for its status (error envelope body and common headers).
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi/datamodel"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/parameters"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/responses"

	"paysvc/internal/apispec"
)

// errorResponseComponents maps each error status that every operation declares
// to its shared entry in components.responses. Responses to requests that match
// no operation are validated against these.
var errorResponseComponents = map[int]string{
	http.StatusBadRequest:            "BadRequest",
	http.StatusUnauthorized:          "Unauthorized",
	http.StatusNotFound:              "NotFound",
	http.StatusRequestEntityTooLarge: "PayloadTooLarge",
	http.StatusTooManyRequests:       "TooManyRequests",
	http.StatusInternalServerError:   "InternalError",
	http.StatusBadGateway:            "BadGateway",
}

// Validator validates requests and responses against apispec.YAML.
// It is safe for concurrent use.
type Validator struct {
	// mu serialises calls into libopenapi-validator: it mutates the request
	// and response bodies it reads and fills shared caches, and its thread
	// safety is not documented, so every call holds this lock.
	mu      sync.Mutex
	lib     validator.Validator
	model   *v3.Document
	opts    *config.ValidationOptions
	version float32
	// errResponses holds the components.responses entry per error status.
	errResponses map[int]*v3.Response
}

var (
	sharedOnce sync.Once
	shared     *Validator
	sharedErr  error
)

// New returns the Validator for apispec.YAML. The document is parsed, its
// model built, checked against the OpenAPI 3.1 meta-schema and its schemas
// compiled once per process; every call returns the same *Validator (or the
// same error, which lists every model-building or document problem).
func New() (*Validator, error) {
	sharedOnce.Do(func() { shared, sharedErr = build(apispec.YAML) })
	return shared, sharedErr
}

// Model returns a freshly built model of apispec.YAML, for tests that walk
// the description themselves (the request generator of internal/httpapi).
// It is not the Validator's: reading it needs no lock.
func Model() (*v3.Document, error) {
	doc, err := libopenapi.NewDocument(apispec.YAML)
	if err != nil {
		return nil, fmt.Errorf("apispec: parse openapi.yaml: %w", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("apispec: build OpenAPI model: %w", err)
	}
	return &model.Model, nil
}

func validationOptions() []config.Option {
	return []config.Option{
		// Assert format keywords (uuid, email, uri), which JSON Schema 2020-12
		// treats as annotations only by default.
		config.WithFormatAssertions(),
	}
}

func build(spec []byte) (*Validator, error) {
	cfg := datamodel.NewDocumentConfiguration()
	// Errors are returned (and reported by New); don't also log them to stdout.
	cfg.Logger = slog.New(slog.DiscardHandler)
	doc, err := libopenapi.NewDocumentWithConfiguration(spec, cfg)
	if err != nil {
		return nil, fmt.Errorf("apispec: parse openapi.yaml: %w", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("apispec: build OpenAPI model: %w", err)
	}
	if model == nil {
		return nil, errors.New("apispec: build OpenAPI model: no model")
	}

	lib := validator.NewValidatorFromV3Model(&model.Model, validationOptions()...)
	lib.SetDocument(doc)
	if ok, verrs := lib.ValidateDocument(); !ok {
		return nil, &Error{Op: "apispec: openapi.yaml checked against the OpenAPI 3.1 schema", Problems: problems(verrs)}
	}

	v := &Validator{
		lib:          lib,
		model:        &model.Model,
		opts:         config.NewValidationOptions(validationOptions()...),
		version:      helpers.VersionToFloat(model.Model.Version),
		errResponses: make(map[int]*v3.Response, len(errorResponseComponents)),
	}
	for status, name := range errorResponseComponents {
		var r *v3.Response
		if model.Model.Components != nil && model.Model.Components.Responses != nil {
			r = model.Model.Components.Responses.GetOrZero(name)
		}
		if r == nil || r.Content == nil || r.Content.GetOrZero("application/json") == nil ||
			r.Content.GetOrZero("application/json").Schema == nil {
			return nil, fmt.Errorf("apispec: components.responses.%s with an application/json schema is missing", name)
		}
		v.errResponses[status] = r
	}
	return v, nil
}

// Problem is one validation failure.
type Problem struct {
	// Message says what failed, e.g. "200 response body for '/v1/products/prod_x' failed to validate schema".
	Message string
	// Reason says why, e.g. "missing property 'created'".
	Reason string
	// Field is the JSONPath of the offending value in the body ("$.data.created"), when known.
	Field string
	// SchemaLocation is the JSON pointer of the failing keyword inside the
	// schema that was applied (e.g. "/properties/data/required"), when known.
	SchemaLocation string
	// SpecLine is the line in openapi.yaml the failure relates to, when known (0 otherwise).
	SpecLine int
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Message)
	if p.Reason != "" {
		b.WriteString(": ")
		b.WriteString(p.Reason)
	}
	if p.Field != "" {
		fmt.Fprintf(&b, " [field %s]", p.Field)
	}
	if p.SchemaLocation != "" {
		fmt.Fprintf(&b, " [schema %s]", p.SchemaLocation)
	}
	if p.SpecLine > 0 {
		fmt.Fprintf(&b, " [openapi.yaml line %d]", p.SpecLine)
	}
	return b.String()
}

// Error is returned by Request and Response when validation fails; it lists
// every problem found.
type Error struct {
	// Op names what was validated, e.g. "response 200 to GET /v1/products/prod_x".
	Op       string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d contract violation(s):", e.Op, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

func problems(verrs []*liberrors.ValidationError) []Problem {
	var out []Problem
	for _, ve := range verrs {
		if ve == nil {
			continue
		}
		line := ve.SpecLine
		if line < 0 {
			line = 0
		}
		if len(ve.SchemaValidationErrors) == 0 {
			out = append(out, Problem{Message: ve.Message, Reason: ve.Reason, SpecLine: line})
			continue
		}
		for _, sf := range ve.SchemaValidationErrors {
			if sf == nil {
				continue
			}
			out = append(out, Problem{
				Message:        ve.Message,
				Reason:         sf.Reason,
				Field:          sf.FieldPath,
				SchemaLocation: sf.KeywordLocation,
				SpecLine:       line,
			})
		}
	}
	return out
}

// readAll drains body (which may be nil) and closes it.
func readAll(body io.ReadCloser) ([]byte, error) {
	if body == nil || body == http.NoBody {
		return nil, nil
	}
	defer body.Close()
	return io.ReadAll(body)
}

// Response validates resp, the answer to req, against the operation req
// matches: the status must be declared, the Content-Type must be a declared
// media type, required response headers must be present and match their
// schemas, and a JSON body must be non-empty and match the response schema.
// For a request that matches no operation (unknown path or method, answered
// with 404 endpoint_not_found), the response must carry a documented error
// status and match that status's shared error response (error envelope and
// headers). It returns nil or an *Error listing every problem.
//
// resp.Body is fully read and replaced by an unread in-memory copy, so the
// caller can read it afterwards. req.Body is not read.
func (v *Validator) Response(req *http.Request, resp *http.Response) error {
	if req == nil || req.URL == nil || resp == nil {
		return errors.New("validate: Response needs a request with a URL and a response")
	}
	body, err := readAll(resp.Body)
	restore := func() { resp.Body = io.NopCloser(bytes.NewReader(body)) }
	restore()
	defer restore()
	if err != nil {
		return fmt.Errorf("validate: reading response body: %w", err)
	}
	op := fmt.Sprintf("response %d to %s %s", resp.StatusCode, req.Method, req.URL.Path)

	v.mu.Lock()
	defer v.mu.Unlock()

	var verrs []*liberrors.ValidationError
	pathItem, pathErrs, pathValue := paths.FindPath(req, v.model, v.opts)
	if unmatched(pathItem, pathErrs) {
		verrs = v.unmatchedResponse(req, resp)
	} else {
		_, verrs = v.lib.GetResponseBodyValidator().ValidateResponseBodyWithPathItem(req, resp, pathItem, pathValue)
		if op := helpers.ExtractOperation(req, pathItem); op != nil && op.Responses != nil && op.Responses.Codes != nil {
			if r := op.Responses.Codes.GetOrZero(strconv.Itoa(resp.StatusCode)); r != nil {
				verrs = append(verrs, v.optionalHeaders(resp, r)...)
			}
		}
	}
	restore()

	out := problems(verrs)
	if len(bytes.TrimSpace(body)) == 0 && req.Method != http.MethodHead {
		// libopenapi-validator accepts an empty body whatever the schema says.
		out = append(out, Problem{
			Message: op + " has an empty body",
			Reason:  "every operation answers with a JSON envelope (or the YAML document)",
		})
	}
	if len(out) > 0 {
		return &Error{Op: op, Problems: out}
	}
	return nil
}

// unmatched reports whether FindPath found no operation for the request
// (unknown path, or known path without this method).
func unmatched(pathItem *v3.PathItem, errs []*liberrors.ValidationError) bool {
	if pathItem == nil {
		return true
	}
	for _, e := range errs {
		if e != nil && e.ValidationType == helpers.PathValidation {
			return true
		}
	}
	return false
}

// unmatchedResponse validates a response to a request that matches no
// operation against the shared components.responses entry for its status.
func (v *Validator) unmatchedResponse(req *http.Request, resp *http.Response) []*liberrors.ValidationError {
	status := strconv.Itoa(resp.StatusCode)
	comp, ok := v.errResponses[resp.StatusCode]
	if !ok {
		return []*liberrors.ValidationError{{
			ValidationType: helpers.PathValidation,
			Message:        fmt.Sprintf("%s %s matches no operation and answered %s", req.Method, req.URL.Path, status),
			Reason: "a request to an undocumented path or method must be answered with a documented " +
				"error status (404 endpoint_not_found, or 400/401/413/429/500/502) and the error envelope",
		}}
	}
	var out []*liberrors.ValidationError
	mediaType, _, _ := helpers.ExtractContentType(resp.Header.Get(helpers.ContentTypeHeader))
	if mediaType != "application/json" {
		out = append(out, &liberrors.ValidationError{
			ValidationType: helpers.ResponseBodyValidation,
			Message:        fmt.Sprintf("%s response to unmatched %s %s has Content-Type %q", status, req.Method, req.URL.Path, resp.Header.Get(helpers.ContentTypeHeader)),
			Reason:         "error responses are application/json",
		})
	} else {
		schema := comp.Content.GetOrZero("application/json").Schema.Schema()
		if ok, errs := responses.ValidateResponseSchema(&responses.ValidateResponseSchemaInput{
			Request:  req,
			Response: resp,
			Schema:   schema,
			Version:  v.version,
			Options:  []config.Option{config.WithExistingOpts(v.opts)},
		}); !ok {
			out = append(out, errs...)
		}
	}
	if comp.Headers != nil {
		if ok, errs := responses.ValidateResponseHeaders(req, resp, comp.Headers, req.URL.Path, status,
			config.WithExistingOpts(v.opts)); !ok {
			out = append(out, errs...)
		}
	}
	return append(out, v.optionalHeaders(resp, comp)...)
}

// optionalHeaders checks the values of declared, non-required headers that
// are present in resp (e.g. Idempotent-Replayed). libopenapi-validator only
// checks the schema of required headers.
func (v *Validator) optionalHeaders(resp *http.Response, declared *v3.Response) []*liberrors.ValidationError {
	if declared == nil || declared.Headers == nil {
		return nil
	}
	var out []*liberrors.ValidationError
	for name, h := range declared.Headers.FromOldest() {
		if h == nil || h.Required || h.Schema == nil {
			continue
		}
		schema := h.Schema.Schema()
		if schema == nil {
			continue
		}
		for _, value := range resp.Header.Values(name) {
			out = append(out, parameters.ValidateParameterSchema(schema, nil, value, "header",
				"response header", name, helpers.ResponseBodyValidation, "headers", v.opts)...)
		}
	}
	return out
}

// Request validates req against the operation it matches: path, query and
// header parameters, the bearer security requirement (presence of an
// "Authorization: Bearer …" header, not the key's validity) and the JSON body.
// A request that matches no operation is an error. It returns nil or an
// *Error listing every problem.
//
// req.Body is fully read and replaced by an unread in-memory copy (GetBody is
// set accordingly), so the request can still be sent afterwards.
func (v *Validator) Request(req *http.Request) error {
	if req == nil || req.URL == nil {
		return errors.New("validate: Request needs a request with a URL")
	}
	hadBody := req.Body != nil && req.Body != http.NoBody
	body, err := readAll(req.Body)
	restore := func() {
		if !hadBody {
			req.Body = http.NoBody
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	restore()
	defer restore()
	if err != nil {
		return fmt.Errorf("validate: reading request body: %w", err)
	}
	op := fmt.Sprintf("request %s %s", req.Method, req.URL.Path)

	v.mu.Lock()
	defer v.mu.Unlock()

	var verrs []*liberrors.ValidationError
	pathItem, pathErrs, pathValue := paths.FindPath(req, v.model, v.opts)
	if unmatched(pathItem, pathErrs) {
		verrs = pathErrs
		if len(verrs) == 0 {
			verrs = []*liberrors.ValidationError{{
				Message: fmt.Sprintf("%s %s matches no operation", req.Method, req.URL.Path),
			}}
		}
	} else {
		_, verrs = v.lib.ValidateHttpRequestSyncWithPathItem(req, pathItem, pathValue)
	}
	restore()

	if out := problems(verrs); len(out) > 0 {
		return &Error{Op: op, Problems: out}
	}
	return nil
}
