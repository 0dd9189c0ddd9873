package telemetry

import "testing"

func TestWithholdQuoted(t *testing.T) {
	const w = Withheld
	tests := []struct{ in, want string }{
		{"no quotes at all", "no quotes at all"},
		{`starting with "HTTP/1.1 200 OK\r\nX: sk-1"; err=<nil>`, "starting with " + w + "; err=<nil>"},
		{`a "x\"y" b "z" c`, "a " + w + " b " + w + " c"},
		{`escaped backslash "a\\" then "sk-2"`, "escaped backslash " + w + " then " + w},
		{`left open "sk-3 and the rest`, "left open " + w},
		{`ends in an escape "sk-4\`, "ends in an escape " + w},
		{`""`, w},
	}
	for _, tt := range tests {
		if got := withholdQuoted(tt.in); got != tt.want {
			t.Errorf("withholdQuoted(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
