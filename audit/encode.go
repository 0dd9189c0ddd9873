package audit

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendEventJSON appends ev encoded exactly as encoding/json marshals an Event (field
// order, omitempty, string escaping, sorted label keys, time and number formats), without
// reflection: every forwarded request writes two records, and this is most of their cost.
// FuzzEventJSON holds it to encoding/json byte for byte. A non-nil id is written, in hex,
// in place of ev.ID (a new record's id, drawn without allocating a string for it).
func appendEventJSON(dst []byte, ev *Event, id *[16]byte) ([]byte, error) {
	start := len(dst)
	slow := func() ([]byte, error) { return appendEventJSONSlow(dst[:start], ev, id) }
	dst = append(dst, `{"time":"`...)
	if ev.Time.Location() == time.UTC { // as the sink stamps records
		var ok bool
		if dst, ok = appendUTC(dst, ev.Time); !ok {
			return slow()
		}
	} else {
		if _, off := ev.Time.Zone(); ev.Time.Year() < 0 || ev.Time.Year() > 9999 || off <= -24*3600 || off >= 24*3600 {
			return slow()
		}
		dst = ev.Time.AppendFormat(dst, time.RFC3339Nano)
	}
	if id != nil {
		dst = append(dst, `","id":"`...)
		dst = append(hex.AppendEncode(dst, id[:]), '"')
	} else {
		dst = append(dst, `","id":`...)
		dst = appendJSONString(dst, ev.ID)
	}
	dst = optString(dst, `,"request_id":`, ev.RequestID)
	dst = optString(dst, `,"stage":`, string(ev.Stage))
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, string(ev.Kind))
	dst = append(dst, `,"sandbox":`...)
	dst = appendJSONString(dst, ev.SandboxID)
	dst = optString(dst, `,"exec_id":`, ev.ExecID)
	if len(ev.Labels) > 0 {
		dst = appendLabelsJSON(append(dst, `,"labels":`...), ev.Labels)
	}
	dst = optStrings(dst, `,"command":`, ev.Command)
	dst = optString(dst, `,"method":`, ev.Method)
	dst = optString(dst, `,"scheme":`, ev.Scheme)
	dst = optString(dst, `,"host":`, ev.Host)
	dst = optInt(dst, `,"port":`, int64(ev.Port))
	dst = optString(dst, `,"path":`, ev.Path)
	dst = optString(dst, `,"query":`, ev.Query)
	dst = optString(dst, `,"phase":`, ev.Phase)
	dst = append(dst, `,"decision":`...)
	dst = appendJSONString(dst, string(ev.Decision))
	dst = optString(dst, `,"rule":`, ev.Rule)
	dst = optString(dst, `,"reason":`, ev.Reason)
	dst = optString(dst, `,"policy_revision":`, ev.PolicyRev)
	dst = optStrings(dst, `,"credentials":`, ev.Creds)
	dst = optString(dst, `,"approval_id":`, ev.ApprovalID)
	dst = optString(dst, `,"approver":`, ev.Approver)
	dst = optInt(dst, `,"status":`, int64(ev.Status))
	dst = optInt(dst, `,"bytes_in":`, ev.BytesIn)
	dst = optInt(dst, `,"bytes_out":`, ev.BytesOut)
	dst = optInt(dst, `,"redactions":`, ev.Redactions)
	if f := ev.DurationMS; f != 0 {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) < 1e-6 || math.Abs(f) >= 1e21 {
			return slow() // exponent form, or an error
		}
		dst = append(dst, `,"duration_ms":`...)
		dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	dst = optString(dst, `,"trace_id":`, ev.TraceID)
	dst = optString(dst, `,"span_id":`, ev.SpanID)
	dst = optString(dst, `,"error_class":`, ev.ErrorClass)
	dst = optInt(dst, `,"suppressed":`, ev.Suppressed)
	return append(dst, '}'), nil
}

// appendEventJSONSlow appends what encoding/json makes of ev (rare values), or its error.
// It and appendLabelsJSON are out of line: this encoding runs at the deepest point of a
// request's stack, and their locals (a copy of the event, a map iterator) would otherwise
// be in appendEventJSON's frame on every request.
//
//go:noinline
func appendEventJSONSlow(dst []byte, ev *Event, id *[16]byte) ([]byte, error) {
	cp := *ev // a copy escapes to json.Marshal, so that ev does not
	if id != nil {
		cp.ID = hex.EncodeToString(id[:])
	}
	b, err := json.Marshal(&cp)
	return append(dst, b...), err
}

// appendLabelsJSON appends labels as a JSON object, keys sorted.
//
//go:noinline
func appendLabelsJSON(dst []byte, labels map[string]string) []byte {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, labels[k])
	}
	return append(dst, '}')
}

func optString(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	return appendJSONString(append(dst, key...), v)
}

// optStrings appends key and the JSON array of ss, unless ss is empty.
func optStrings(dst []byte, key string, ss []string) []byte {
	if len(ss) == 0 {
		return dst
	}
	dst = append(append(dst, key...), '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

func optInt(dst []byte, key string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, key...), v, 10)
}

const hexDigits = "0123456789abcdef"

// jsonPlain marks the bytes appendJSONString copies as they are: printable ASCII but for
// `"`, `\`, `<`, `>` and `&`. Every other byte is escaped or starts a multi-byte character.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s as a JSON string the way encoding/json writes it: `"` and `\`
// backslashed; \b \f \n \r \t by name; other control bytes and < > & as \u00XX; invalid
// UTF-8 as \ufffd; U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, `\b`...)
			case '\f':
				dst = append(dst, `\f`...)
			case '\n':
				dst = append(dst, `\n`...)
			case '\r':
				dst = append(dst, `\r`...)
			case '\t':
				dst = append(dst, `\t`...)
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendUTC appends t, a UTC time, as t.AppendFormat(dst, time.RFC3339Nano) does
// (fractional seconds without trailing zeros, none when zero; "Z"), from one calendar
// computation instead of the layout's several: every record's time is one. It reports
// false, appending nothing, for a year outside 0-9999, which encoding/json refuses.
func appendUTC(dst []byte, t time.Time) ([]byte, bool) {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return dst, false
	}
	hour, min, sec := t.Clock()
	dst = appendDigits(dst, year, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, int(month), 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, day, 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, hour, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, min, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, sec, 2)
	if ns := t.Nanosecond(); ns != 0 {
		dst = append(dst, '.')
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		dst = appendDigits(dst, ns, digits)
	}
	return append(dst, 'Z'), true
}

// appendDigits appends v (0 <= v < 10^width) in decimal, zero-padded to width digits.
func appendDigits(dst []byte, v, width int) []byte {
	var buf [9]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, buf[:width]...)
}
