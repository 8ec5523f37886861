// The process's zap logger, built once here and passed down.

package daemon

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds a console (default) or JSON logger on stderr whose level
// can change on reload.
func newLogger(out io.Writer, format, level string) (*zap.Logger, zap.AtomicLevel, error) {
	lvl := zap.NewAtomicLevel()
	if err := setLevel(lvl, level); err != nil {
		return nil, lvl, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	switch format {
	case "", "console":
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	default:
		return nil, lvl, fmt.Errorf("unknown log format %q (want console or json)", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(out)), lvl)
	return zap.New(core), lvl, nil
}

func setLevel(lvl zap.AtomicLevel, level string) error {
	if level == "" {
		level = "info"
	}
	l, err := zapcore.ParseLevel(level)
	if err != nil {
		return err
	}
	lvl.SetLevel(l)
	return nil
}
