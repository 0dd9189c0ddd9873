//go:build !(linux && amd64)

// Command sysprobe makes system calls through a chosen ABI of x86_64 (see main.go); it has
// nothing to probe elsewhere.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sysprobe: x86_64 Linux only")
	os.Exit(2)
}
