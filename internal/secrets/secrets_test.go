package secrets

import (
	"bytes"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	b, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte(`{"client_secret":"pi_x_secret_y"}`)
	sealed := b.Seal(msg, []byte("ctx-a"))
	if bytes.Contains(sealed, []byte("secret_y")) {
		t.Fatalf("sealed value contains the plaintext")
	}
	if again := b.Seal(msg, []byte("ctx-a")); bytes.Equal(again, sealed) {
		t.Errorf("two seals of one value are equal: nonces repeat")
	}
	got, err := b.Open(sealed, []byte("ctx-a"))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Open = %q, %v; want %q", got, err, msg)
	}
	if _, err := b.Open(sealed, []byte("ctx-b")); err != ErrOpen {
		t.Errorf("Open with another context: got %v, want ErrOpen", err)
	}
	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	if _, err := b.Open(tampered, []byte("ctx-a")); err != ErrOpen {
		t.Errorf("Open of a tampered value: got %v, want ErrOpen", err)
	}
	other, _ := New(bytes.Repeat([]byte{8}, 32))
	if _, err := other.Open(sealed, []byte("ctx-a")); err != ErrOpen {
		t.Errorf("Open with another key: got %v, want ErrOpen", err)
	}
	if _, err := b.Open([]byte("short"), nil); err != ErrOpen {
		t.Errorf("Open of a short value: got %v, want ErrOpen", err)
	}
	if _, err := New(key[:16]); err == nil {
		t.Errorf("New with a 16-byte key: got nil error")
	}
}
