package main

import (
	"io"
	stdlog "log"
	"log/slog"

	"github.com/airlock-proxy/airlock/internal/redact"
	"github.com/airlock-proxy/airlock/telemetry"
)

// newLogger is the process's logger, at the config's level and in its format; the
// standard library's log goes to it too.
func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level))
	// Every line goes through redact: a config value (a bundle URL with a token, a
	// database URL with a password) quoted in a message or an error never reaches the log.
	o := &slog.HandlerOptions{Level: lvl, ReplaceAttr: redact.Attr}
	var l *slog.Logger
	if cfg.Log.Format == "text" {
		l = slog.New(telemetry.NewTraceHandler(slog.NewTextHandler(w, o)))
	} else {
		l = slog.New(telemetry.NewTraceHandler(slog.NewJSONHandler(w, o)))
	}
	// net/http logs through the standard library's logger, quoting bytes a peer sent (an
	// upstream's unsolicited response may echo a credential): its lines come here, with
	// every quoted string withheld.
	stdlog.SetOutput(telemetry.StdLogWriter(l))
	stdlog.SetFlags(0)
	return l
}
