package payments

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"
)

//go:embed blocklist.txt
var defaultBlocklist []byte

// Content-violation suspension rule of the spec: this many violations within
// the window suspend the merchant's keys.
const (
	violationThreshold = 5
	violationWindow    = 24 * time.Hour
)

// ViolationRetention is how long violations are kept; older ones are pruned.
const ViolationRetention = violationWindow

// Blocklist screens text for prohibited terms.
type Blocklist struct {
	terms []string // normalized, each surrounded by spaces
}

// LoadBlocklist reads terms from path, or the built-in list when path is "".
func LoadBlocklist(path string) (*Blocklist, error) {
	data := defaultBlocklist
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read content blocklist: %w", err)
		}
	}
	return ParseBlocklist(bytes.NewReader(data))
}

// ParseBlocklist reads one term per line; blank lines and # comments are skipped.
func ParseBlocklist(r io.Reader) (*Blocklist, error) {
	b := &Blocklist{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if t := normalize(line); strings.TrimSpace(t) != "" {
			b.terms = append(b.terms, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read content blocklist: %w", err)
	}
	return b, nil
}

// Match reports whether text contains a prohibited term as whole words.
func (b *Blocklist) Match(text string) bool {
	if b == nil || text == "" {
		return false
	}
	n := normalize(text)
	for _, t := range b.terms {
		if strings.Contains(n, t) {
			return true
		}
	}
	return false
}

// normalize lower-cases s and turns every run of non-alphanumerics into one
// space, with a space at each end, so that " term " matches whole words only
// and punctuation or line breaks cannot hide a term.
func normalize(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) + 2)
	sb.WriteByte(' ')
	space := true
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			sb.WriteRune(unicode.ToLower(r))
			space = false
		} else if !space {
			sb.WriteByte(' ')
			space = true
		}
	}
	if !space {
		sb.WriteByte(' ')
	}
	return sb.String()
}

// screen checks each named text; on a hit it records a violation (which may
// suspend the merchant) and returns prohibited_content.
func (s *Service) screen(ctx context.Context, sc Scope, fields map[string]*string) error {
	for field, text := range fields {
		if text == nil || !s.blocklist.Match(*text) {
			continue
		}
		now := s.clock.Base()
		suspended, err := s.store.RecordViolation(ctx, sc, field, now, now.Add(-violationWindow), violationThreshold)
		if err != nil {
			return fmt.Errorf("record content violation: %w", err)
		}
		if suspended {
			s.auth.forget(sc.MerchantID, "")
		}
		return Errorf(ProhibitedContent, "The %s contains content that violates the acceptable use policy.", field)
	}
	return nil
}
