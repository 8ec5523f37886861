// An adapter from GoBGP's logger interface to zap.

package bgp

import (
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"go.uber.org/zap"
)

// zapLogger passes GoBGP's messages to zap; GoBGP logs per event
// (session changes, updates), never per packet of the data plane.
type zapLogger struct{ log *zap.Logger }

func (l zapLogger) fields(f gobgplog.Fields) []zap.Field {
	out := make([]zap.Field, 0, len(f))
	for k, v := range f {
		out = append(out, zap.Any(k, v))
	}
	return out
}

func (l zapLogger) Panic(msg string, f gobgplog.Fields) { l.log.Error(msg, l.fields(f)...); panic(msg) }
func (l zapLogger) Fatal(msg string, f gobgplog.Fields) { l.log.Error(msg, l.fields(f)...) }
func (l zapLogger) Error(msg string, f gobgplog.Fields) { l.log.Error(msg, l.fields(f)...) }
func (l zapLogger) Warn(msg string, f gobgplog.Fields)  { l.log.Warn(msg, l.fields(f)...) }
func (l zapLogger) Info(msg string, f gobgplog.Fields)  { l.log.Info(msg, l.fields(f)...) }
func (l zapLogger) Debug(msg string, f gobgplog.Fields) { l.log.Debug(msg, l.fields(f)...) }

// SetLevel is ignored: zap's level, set in cmd, decides.
func (l zapLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel reports Info so that GoBGP skips building its debug messages.
func (l zapLogger) GetLevel() gobgplog.LogLevel { return gobgplog.InfoLevel }
