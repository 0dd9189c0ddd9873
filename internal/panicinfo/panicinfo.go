// Package panicinfo describes a recovered panic for a log line without its value's text,
// which may hold whatever the panicking code had in hand (a request's bytes, a header
// carrying an attached credential).
package panicinfo

import (
	"fmt"
	"runtime"
)

// Describe is a runtime error's message (a nil dereference, an index out of range: the
// runtime's own words) or the value's type.
func Describe(v any) string {
	if err, ok := v.(runtime.Error); ok {
		return err.Error()
	}
	return fmt.Sprintf("%T", v)
}
