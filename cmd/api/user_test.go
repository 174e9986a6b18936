package main

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"paysvc/internal/testenv"
)

// TestUserCreate: `api user create` prints the user, never the password,
// and stores only a bcrypt hash of it.
func TestUserCreate(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	m := cli(t, "merchant", "create", "--name", "Acme")
	m.wantExit(t, 0, "merchant create")
	mid := m.decode(t)["id"].(string)
	const pw = "a long enough passphrase"

	withStdin := func(in string, args ...string) result {
		t.Helper()
		orig := stdin
		stdin = strings.NewReader(in)
		defer func() { stdin = orig }()
		return cli(t, args...)
	}
	r := withStdin(pw+"\n", "user", "create", "--merchant", mid, "--email", "Ops@Acme.example", "--role", "viewer", "--password-stdin")
	r.wantExit(t, 0, "user create")
	v := r.decode(t)
	if !strings.HasPrefix(v["id"].(string), "usr_") || v["email"] != "ops@acme.example" || v["role"] != "viewer" || v["merchant_id"] != mid {
		t.Errorf("got user %v, want usr_…, ops@acme.example, viewer, %s", v, mid)
	}
	if strings.Contains(r.stdout+r.stderr+r.logs, pw) {
		t.Error("the password was printed or logged")
	}
	var hash string
	if err := db.Get(&hash, `SELECT password_hash FROM dashboard_users WHERE id = $1`, v["id"]); err != nil {
		t.Fatal(err)
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) != nil {
		t.Error("the stored hash does not match the password")
	}

	for _, tt := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"no --password-stdin", pw, []string{"--merchant", mid, "--email", "a@acme.example"}, "--password-stdin is required"},
		{"empty stdin", "", []string{"--merchant", mid, "--email", "a@acme.example", "--password-stdin"}, "no password"},
		{"short password", "short\n", []string{"--merchant", mid, "--email", "a@acme.example", "--password-stdin"}, "password must be"},
		{"bad role", pw, []string{"--merchant", mid, "--email", "a@acme.example", "--role", "owner", "--password-stdin"}, "role must be"},
		{"email taken", pw, []string{"--merchant", mid, "--email", "ops@acme.example", "--password-stdin"}, "already"},
		{"unknown merchant", pw, []string{"--merchant", "mch_nope", "--email", "b@acme.example", "--password-stdin"}, "does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := withStdin(tt.stdin, append([]string{"user", "create"}, tt.args...)...)
			r.wantExit(t, 1, "user create "+tt.name)
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("got stderr %q, want it to contain %q", r.stderr, tt.want)
			}
		})
	}
}
