package payments

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limits of the spec on inputs.
const (
	MaxAmount              = 99999999
	maxMetadataKeys        = 50
	maxMetadataKeyLen      = 40 // Stripe's limits, which merchants already know
	maxMetadataValueLen    = 500
	maxProductImages       = 8
	maxStatementDescriptor = 22
	maxTextLen             = 5000
)

// MetadataInput is metadata in a request body. JSON null values are refused
// (the spec's metadata values are strings) rather than read as "", which an
// update would take as "remove this key".
type MetadataInput map[string]string

// UnmarshalJSON decodes an object of string values; a value of another type
// is a validation_error naming its key.
func (m *MetadataInput) UnmarshalJSON(b []byte) error {
	out, err := decodeStringMap(b, "metadata")
	*m = out
	return err
}

// EvidenceInput's evidence map: string values only, like metadata.
type evidenceMap map[string]string

func (m *evidenceMap) UnmarshalJSON(b []byte) error {
	out, err := decodeStringMap(b, "evidence")
	*m = out
	return err
}

// decodeStringMap decodes a JSON object of string values (or null); any
// other value is a validation_error naming field.key.
func decodeStringMap(b []byte, field string) (map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, Invalid(field, "must be an object of string values")
	}
	if raw == nil {
		return nil, nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var str string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &str) != nil {
			return nil, Invalid(field+"."+k, "has the wrong type: expected a string")
		}
		out[k] = str
	}
	return out, nil
}

func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataKeys {
		return Invalid("metadata", "can have at most %d keys", maxMetadataKeys)
	}
	for k, v := range md {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKeyLen {
			return Invalid("metadata", "keys must be 1 to %d characters", maxMetadataKeyLen)
		}
		if utf8.RuneCountInString(v) > maxMetadataValueLen {
			return Invalid("metadata."+k, "must be at most %d characters", maxMetadataValueLen)
		}
	}
	return nil
}

// checkHTTPS accepts an absolute https:// URL with a host.
func checkHTTPS(field, raw string) error {
	if !strings.HasPrefix(raw, "https://") {
		return Invalid(field, "must be a URL starting with https://")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return Invalid(field, "must be a valid URL")
	}
	return nil
}

// EmailPattern is the usual dot-atom address with a dotted domain of
// letters, digits and hyphens whose top-level label is letters or an IDN
// in its ASCII form (xn--…): stricter than RFC 5322 (no quoted parts, no IP
// literals), as is every address a shop will actually send mail to. The
// OpenAPI description carries the same pattern.
const EmailPattern = `^[A-Za-z0-9!#$%&'*+/=?^_` + "`" + `{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_` + "`" + `{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,63}|[Xx][Nn]--[A-Za-z0-9-]{1,59})$`

var emailPattern = regexp.MustCompile(EmailPattern)

// ValidEmail reports whether s is an email address the service accepts.
func ValidEmail(s string) bool { return len(s) <= 254 && emailPattern.MatchString(s) }

func checkEmail(field, s string) error {
	if !ValidEmail(s) {
		return Invalid(field, "must be a valid email address")
	}
	return nil
}

func checkText(field string, s *string, required bool) error {
	if s == nil {
		if required {
			return Invalid(field, "is required")
		}
		return nil
	}
	if required && *s == "" {
		return Invalid(field, "must be at least 1 character")
	}
	// Valid UTF-8 without NUL is the API edge's check (httpapi's gate).
	if utf8.RuneCountInString(*s) > maxTextLen {
		return Invalid(field, "must be at most %d characters", maxTextLen)
	}
	return nil
}

// checkCurrency accepts a three-letter ISO 4217 code in any case and returns it
// lower-cased, as Stripe stores it.
func checkCurrency(field string, c *string) (string, error) {
	if c == nil {
		return "", Invalid(field, "is required")
	}
	lc := strings.ToLower(*c)
	if len(lc) != 3 || strings.Trim(lc, "abcdefghijklmnopqrstuvwxyz") != "" {
		return "", Invalid(field, "must be a three-letter ISO 4217 currency code")
	}
	if _, ok := currencies[lc]; !ok {
		return "", Invalid(field, "%q is not a supported ISO 4217 currency", *c)
	}
	return lc, nil
}

func checkAmount(field string, a *int64) error {
	if a == nil {
		return Invalid(field, "is required")
	}
	if *a < 1 || *a > MaxAmount {
		return Invalid(field, "must be between 1 and %d", MaxAmount)
	}
	return nil
}
