//go:build cgo

// The holder of a native sandbox is C code (stage_linux.c), run from an ELF constructor
// before the Go runtime starts.

package native

import "C"

// cHolder reports whether sandbox holders run as C code rather than as holder_linux.go.
const cHolder = true
