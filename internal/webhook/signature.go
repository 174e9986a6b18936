// Package webhook signs, sends and verifies webhook deliveries.
//
// A receiver verifies a delivery like this (see README "Webhooks"):
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
	"encoding/hex"
	"errors"
	"strings"
)

// Delivery headers.
const (
	SignatureHeader = "X-Service-Signature"
	EventIDHeader   = "X-Service-Event-Id"
	EventTypeHeader = "X-Service-Event-Type"
)

const signaturePrefix = "sha256="

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
