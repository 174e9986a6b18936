// Package secrets seals values stored at rest with SECRETS_KEY (AES-256-GCM):
// webhook signing secrets, and stored API responses that may hold a client
// secret (idempotent replays).
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Box seals and opens values with one 32-byte key.
type Box struct {
	aead cipher.AEAD
	mac  []byte // fingerprint key, derived from the key
}

// New returns a Box for a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("secrets key: got %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("paysvc fingerprint v1"))
	return &Box{aead: aead, mac: m.Sum(nil)}, nil
}

// Fingerprint is a keyed hash of parts (HMAC-SHA256 under a key derived
// from the box's), in hex: equal inputs give equal fingerprints, and without
// SECRETS_KEY a fingerprint cannot be checked against guesses (a bank
// account number has few enough digits to guess). purpose separates uses.
func (b *Box) Fingerprint(purpose string, parts ...string) string {
	m := hmac.New(sha256.New, b.mac)
	m.Write([]byte(purpose))
	for _, p := range parts {
		m.Write([]byte{0})
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// Seal encrypts plaintext; aad binds it to its context (say, a row's key) so
// that a sealed value copied elsewhere does not open.
func (b *Box) Seal(plaintext, aad []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(plaintext)+b.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return b.aead.Seal(nonce, nonce, plaintext, aad)
}

// ErrOpen is a sealed value that does not open with this key and context.
var ErrOpen = errors.New("sealed value does not open: wrong key or tampered")

// Open decrypts a value made by Seal with the same aad.
func (b *Box) Open(sealed, aad []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n+b.aead.Overhead() {
		return nil, ErrOpen
	}
	out, err := b.aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}
