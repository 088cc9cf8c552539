// Package logging builds the agent's zap logger: JSON for machines (the
// default, what a DaemonSet's log collector wants), console for a person at a
// terminal.
package logging

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// Format values accepted by New.
const (
	FormatAuto    = "auto"
	FormatJSON    = "json"
	FormatConsole = "console"
)

// New returns a logger at level ("debug", "info", "warn", "error") in format
// ("auto" picks console when stderr is a terminal, JSON otherwise).
func New(level, format string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case FormatAuto:
		format = FormatJSON
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = FormatConsole
		}
	case FormatJSON, FormatConsole:
	default:
		return nil, fmt.Errorf("bad --log-format %q: want auto, json or console", format)
	}
	var cfg zap.Config
	if format == FormatConsole {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.Development = false
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	cfg.Sampling = nil
	return cfg.Build()
}
