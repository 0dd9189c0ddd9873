//go:build linux && amd64

package main

import (
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// TestNumbers checks the probe's call numbers against the kernel's tables (as
// go-seccomp-bpf carries them): a wrong i386 or x32 number would probe some other call.
func TestNumbers(t *testing.T) {
	for name, n := range numbers {
		for i, a := range []*arch.Info{arch.X86_64, arch.I386, arch.X32} {
			if n[i] < 0 {
				continue
			}
			if got := a.SyscallNumbers[n[i]]; got != name {
				t.Errorf("%s: %s number %d is %q in the table", name, a.Name, n[i], got)
			}
		}
	}
	for _, p := range probes {
		if _, ok := numbers[p.call]; !ok {
			t.Errorf("probe of %s: no numbers", p.call)
		}
	}
}
