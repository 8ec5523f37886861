// Rate-limited warnings for paths that may fail many times a second.

package proxy

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// rateLog writes a warning at most once per interval, so that a failure
// repeated per connection or per datagram costs one log line, not a flood.
// The zero value allows one line a second.
type rateLog struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

// allow reports whether a line may be written now, and if so records it.
func (r *rateLog) allow() bool {
	every := r.every
	if every == 0 {
		every = time.Second
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && time.Since(r.last) < every {
		return false
	}
	r.last = time.Now()
	return true
}

func (r *rateLog) warn(log *zap.Logger, msg string, fields ...zap.Field) {
	if r.allow() {
		log.Warn(msg, fields...)
	}
}
