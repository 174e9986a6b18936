package testenv

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer collects what concurrent writers write (a logger's handlers,
// a process's stdout and stderr) for a test to read at any time.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines are the non-empty lines written so far.
func (l *LogBuffer) Lines() []string {
	return strings.FieldsFunc(l.String(), func(r rune) bool { return r == '\n' })
}
