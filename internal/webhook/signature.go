// Package webhook signs, sends and verifies webhook deliveries.
//
// Every delivery carries two signatures of its exact body:
//   - X-Service-Signature (the spec's): sha256=<hex> of HMAC-SHA256 keyed
//     with the whole secret string, made with the endpoint's current secret;
//   - Standard Webhooks (https://www.standardwebhooks.com): webhook-id (the
//     event id), webhook-timestamp (Unix seconds of the attempt) and
//     webhook-signature, "v1,<base64>" of HMAC-SHA256 over
//     "<webhook-id>.<webhook-timestamp>.<body>" keyed with the bytes the
//     secret encodes (StandardKey), one per secret in force, space-separated:
//     during a rotation's grace period the current and the previous secret.
//
// A receiver verifies the spec's signature like this (see README "Webhooks"):
//
//	body, _ := io.ReadAll(r.Body) // the exact bytes, before any JSON decoding
//	if err := webhook.Verify(secret, body, r.Header.Get(webhook.SignatureHeader)); err != nil {
//		http.Error(w, "bad signature", http.StatusBadRequest)
//		return
//	}
//	// then record r.Header.Get(webhook.EventIDHeader) and skip it if seen before.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Delivery headers.
const (
	SignatureHeader = "X-Service-Signature"
	EventIDHeader   = "X-Service-Event-Id"
	EventTypeHeader = "X-Service-Event-Type"
)

// Standard Webhooks headers (lower-case, as the specification writes them).
const (
	StandardIDHeader        = "webhook-id"
	StandardTimestampHeader = "webhook-timestamp"
	StandardSignatureHeader = "webhook-signature"
)

const signaturePrefix = "sha256="

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// StandardKey returns the Standard Webhooks HMAC key of a secret: what the
// part after whsec_ encodes in standard base64, as the official libraries
// read it. Secrets made before issue 13 are whsec_ and 32 base62
// characters: valid base64 (32 characters of its alphabet, no padding
// needed) of 24 bytes, so the libraries read them unchanged too. A secret
// that is not base64 at all (none is made) is used as its own bytes.
func StandardKey(secret string) []byte {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) == 0 {
		return []byte(secret)
	}
	return key
}

// SignStandard returns one Standard Webhooks signature, "v1,<base64>" of
// HMAC-SHA256(key, "<msgID>.<timestamp>.<body>").
func SignStandard(key []byte, msgID string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, timestamp, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// SignHeaders sets the signature and event headers of one delivery attempt
// of body, made at `at`: X-Service-Signature with secrets[0] (the current
// secret), and the Standard Webhooks headers with a v1 signature for every
// secret (the current one, then the previous one during a rotation's grace
// period), space-separated as the specification allows. The API's
// deliveries and `api listen` both sign through here (or through Keys,
// which is this with the keys derived once), so they cannot differ.
func SignHeaders(h http.Header, secrets []string, eventID, eventType string, at time.Time, body []byte) {
	NewKeys(secrets...).SignHeaders(h, eventID, eventType, at, body)
}

// Keys are an endpoint's secrets in force, current first, with their HMAC
// keys derived once: the worker keeps them between deliveries instead of
// decoding every secret for every attempt.
type Keys struct {
	current  []byte   // X-Service-Signature's key: the whole current secret
	standard [][]byte // StandardKey of each secret, current first
}

// NewKeys derives the keys of secrets (current first; at least one).
func NewKeys(secrets ...string) Keys {
	k := Keys{current: []byte(secrets[0]), standard: make([][]byte, len(secrets))}
	for i, s := range secrets {
		k.standard[i] = StandardKey(s)
	}
	return k
}

// SignHeaders is the package's SignHeaders with these keys.
func (k Keys) SignHeaders(h http.Header, eventID, eventType string, at time.Time, body []byte) {
	ts := at.Unix()
	sigs := make([]string, 0, len(k.standard))
	for _, key := range k.standard {
		sigs = append(sigs, SignStandard(key, eventID, ts, body))
	}
	mac := hmac.New(sha256.New, k.current)
	mac.Write(body)
	h.Set(SignatureHeader, signaturePrefix+hex.EncodeToString(mac.Sum(nil)))
	h.Set(EventIDHeader, eventID)
	h.Set(EventTypeHeader, eventType)
	// Set canonicalises the names (Webhook-Id); HTTP header names are
	// case-insensitive, and HTTP/2 sends them in lower case.
	h.Set(StandardIDHeader, eventID)
	h.Set(StandardTimestampHeader, strconv.FormatInt(ts, 10))
	h.Set(StandardSignatureHeader, strings.Join(sigs, " "))
}

// Sign returns the X-Service-Signature value of body: "sha256=" and the hex
// HMAC-SHA256 of the exact bytes, keyed with the endpoint's secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return signaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// Errors of Verify.
var (
	ErrMissingSignature = errors.New("webhook: missing signature")
	ErrMalformed        = errors.New("webhook: signature is not sha256=<64 hex>")
	ErrMismatch         = errors.New("webhook: signature does not match")
)

// Verify checks a delivery's signature header against the raw body, in
// constant time. A header without the sha256= prefix, or whose digest is not
// 64 hex characters, is invalid.
func Verify(secret string, body []byte, header string) error {
	if header == "" {
		return ErrMissingSignature
	}
	hexDigest, ok := strings.CutPrefix(header, signaturePrefix)
	if !ok || len(hexDigest) != sha256.Size*2 {
		return ErrMalformed
	}
	got, err := hex.DecodeString(hexDigest)
	if err != nil {
		return ErrMalformed
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrMismatch
	}
	return nil
}
