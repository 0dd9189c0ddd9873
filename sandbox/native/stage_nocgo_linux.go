//go:build !cgo

package native

// cHolder reports whether sandbox holders run as C code (stage_linux.c, built only with
// cgo) rather than as holder_linux.go.
const cHolder = false
