package worker

import (
	"net/http"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/secrets"
	"paysvc/internal/webhook"
)

// countingSealer counts the secrets it opens.
type countingSealer struct {
	*secrets.Box
	opened int
}

func (c *countingSealer) Open(sealed, aad []byte) ([]byte, error) {
	c.opened++
	return c.Box.Open(sealed, aad)
}

// signature is the webhook-signature header keys make for a fixed message.
func signature(k webhook.Keys) string {
	h := http.Header{}
	k.SignHeaders(h, "evt_1", "payment_intent.succeeded", time.Unix(1700000000, 0), []byte(`{}`))
	return h.Get(webhook.StandardSignatureHeader)
}

func TestKeyCacheFollowsTheRowsSealedSecrets(t *testing.T) {
	box, err := secrets.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	s := &countingSealer{Box: box}
	aad := payments.EndpointAAD("we_1")
	oldSealed := box.Seal([]byte("whsec_b2xkb2xkb2xkb2xkb2xkb2xkb2xk"), aad)
	newSealed := box.Seal([]byte("whsec_bmV3bmV3bmV3bmV3bmV3bmV3bmV3"), aad)
	want := func(secrets ...string) string { return signature(webhook.NewKeys(secrets...)) }
	noFailure := func(current bool) { t.Errorf("a secret did not open (current %v)", current) }

	var c keyCache
	now := time.Unix(1700000000, 0)
	get := func(del payments.Delivery) string {
		t.Helper()
		k, err := c.get(del, s, now, noFailure)
		if err != nil {
			t.Fatal(err)
		}
		return signature(k)
	}
	del := payments.Delivery{EndpointID: "we_1", SecretSealed: oldSealed}
	for range 3 {
		if got := get(del); got != want("whsec_b2xkb2xkb2xkb2xkb2xkb2xkb2xk") {
			t.Fatalf("before rotation: got %s", got)
		}
	}
	if s.opened != 1 {
		t.Errorf("three deliveries with one secret: opened %d times, want 1", s.opened)
	}

	// Rotated: the row carries the new secret and the old one as previous.
	del = payments.Delivery{EndpointID: "we_1", SecretSealed: newSealed, PreviousSecretSealed: oldSealed}
	if got := get(del); got != want("whsec_bmV3bmV3bmV3bmV3bmV3bmV3bmV3", "whsec_b2xkb2xkb2xkb2xkb2xkb2xkb2xk") {
		t.Errorf("during the grace: got %s, want the new and the old secret's signatures", got)
	}
	// The grace is over: the row no longer carries the previous secret.
	del.PreviousSecretSealed = nil
	if got := get(del); got != want("whsec_bmV3bmV3bmV3bmV3bmV3bmV3bmV3") {
		t.Errorf("after the grace: got %s, want the new secret's signature alone", got)
	}
	opened := s.opened
	get(del)
	if s.opened != opened {
		t.Errorf("a second delivery after the grace opened the secret again")
	}
	now = now.Add(keyCacheTTL)
	get(del)
	if s.opened != opened+1 {
		t.Errorf("after the TTL: opened %d times, want %d (opened again)", s.opened, opened+1)
	}

	// A secret that does not open is an error, and nothing is cached.
	c = keyCache{}
	bad := payments.Delivery{EndpointID: "we_1", SecretSealed: []byte("not sealed")}
	failedCurrent := false
	if _, err := c.get(bad, s, now, func(current bool) { failedCurrent = current }); err == nil || !failedCurrent {
		t.Errorf("unopenable secret: got err %v, failed(current) %v; want an error and failed(true)", err, failedCurrent)
	}
	if len(c.m) != 0 {
		t.Errorf("unopenable secret: %d cache entries, want 0", len(c.m))
	}
}
