package testenv

import (
	"bytes"
	"sync"
)

// LogBuffer collects log output from many goroutines (a stack's services,
// a child process's pipes) for a test to read.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Count is how many times sub occurs in what was written so far.
func (l *LogBuffer) Count(sub string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(bytes.Count(l.b.Bytes(), []byte(sub)))
}
