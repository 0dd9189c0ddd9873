package panicinfo

import (
	"strings"
	"testing"
)

func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestDescribeKeepsNoValueText(t *testing.T) {
	const canary = "Bearer canary-secret-7f3a"
	for _, v := range []any{canary, fmtError(canary), []byte(canary)} {
		if got := Describe(v); strings.Contains(got, "canary") {
			t.Errorf("Describe(%T) = %q holds the value's text", v, got)
		}
	}
	var m map[string]int
	v := recovered(func() { m["x"] = 1 })
	if got := Describe(v); !strings.Contains(got, "nil map") {
		t.Errorf("Describe(runtime error) = %q, want the runtime's message", got)
	}
}

type fmtError string

func (e fmtError) Error() string { return string(e) }
