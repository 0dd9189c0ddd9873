package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
)

// StdLogWriter returns a writer for the standard library's log package (log.SetOutput,
// with log.SetFlags(0)) that logs each line it is given to l at warn level, message
// "standard library", the line under "line" with every Go-quoted string in it withheld.
// net/http and its HTTP/2 transport log there, and quote bytes a peer sent: "Unsolicited
// response received on idle HTTP channel starting with %q" holds the first bytes an
// upstream wrote after its response, which may echo a credential airlock attached.
func StdLogWriter(l *slog.Logger) io.Writer { return stdLog{l: l} }

type stdLog struct{ l *slog.Logger }

// Withheld replaces each quoted string of a standard library log line.
const Withheld = `"[withheld: bytes from a peer]"`

func (s stdLog) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		text := strings.TrimRight(string(line), "\r\n")
		if text == "" {
			continue
		}
		s.l.LogAttrs(context.Background(), slog.LevelWarn, "standard library", slog.String("line", withholdQuoted(text)))
	}
	return len(p), nil
}

// withholdQuoted replaces each "..." of text (backslash escapes inside) with Withheld; a
// quote left open withholds the rest of the line.
func withholdQuoted(text string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(text, '"')
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		b.WriteString(Withheld)
		end := -1
		for j := i + 1; j < len(text); j++ {
			if text[j] == '\\' {
				j++
			} else if text[j] == '"' {
				end = j
				break
			}
		}
		if end < 0 {
			return b.String()
		}
		text = text[end+1:]
	}
}
