package seccomp

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// Arch is an architecture the policy can be built for: its audit identifier (what the
// kernel puts in seccomp_data.arch for a call of that ABI) and its system-call table.
type Arch struct {
	Name  string
	Audit uint32
	// X32 says that the same audit identifier also carries the x32 ABI, whose calls have
	// bit 30 set in their number: refused as a foreign ABI.
	X32 bool
	// OCI is the architecture's name in an OCI seccomp profile.
	OCI   string
	table *arch.Info
}

// Architectures the policy is built for. Both are little-endian, which the program's
// argument loads assume.
var (
	AMD64 = &Arch{Name: "amd64", Audit: uint32(arch.X86_64.ID), X32: true, OCI: "SCMP_ARCH_X86_64", table: arch.X86_64}
	ARM64 = &Arch{Name: "arm64", Audit: uint32(arch.AARCH64.ID), OCI: "SCMP_ARCH_AARCH64", table: arch.AARCH64}
)

// x32Bit marks an x32 system call on x86_64.
const x32Bit = 0x40000000

// Native is the architecture of this build.
func Native() (*Arch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return AMD64, nil
	case "arm64":
		return ARM64, nil
	}
	return nil, fmt.Errorf("seccomp: no system-call policy for %s", runtime.GOARCH)
}

// Number is name's system-call number on a, and whether a has it.
func (a *Arch) Number(name string) (uint32, bool) {
	n, ok := a.table.SyscallNames[name]
	return uint32(n), ok
}

// known reports whether any supported architecture has a call named name: a name none
// has is a mistake in the policy, not a call an architecture lacks.
func known(name string) bool {
	_, amd := AMD64.Number(name)
	_, arm := ARM64.Number(name)
	return amd || arm
}

// Return values of a seccomp filter.
const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retAllow       = 0x7fff0000
)

// Offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Classic BPF opcodes the program uses.
const (
	opLdAbs  = 0x20 // BPF_LD | BPF_W | BPF_ABS
	opAndK   = 0x54 // BPF_ALU | BPF_AND | BPF_K
	opJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	opJgtK   = 0x25 // BPF_JMP | BPF_JGT | BPF_K
	opJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	opRetK   = 0x06 // BPF_RET | BPF_K
	maxInsns = 4096 // BPF_MAXINSNS
)

// BPF compiles the profile for a: first the architecture (any other ABI, x32 included,
// kills the process), then one block per named call, then the default. Calls whose result
// does not depend on their arguments come out constant, so the kernel's filter cache
// skips the program for the allowed ones.
func (p *Profile) BPF(a *Arch) ([]bpf.RawInstruction, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	as := &assembler{}
	as.stmt(opLdAbs, offArch)
	native := as.label()
	as.jump(opJeqK, a.Audit, native, next)
	as.ret(retKillProcess)
	as.mark(native)
	as.stmt(opLdAbs, offNr)
	if a.X32 {
		ok := as.label()
		as.jump(opJgeK, x32Bit, next, ok)
		as.ret(retKillProcess)
		as.mark(ok)
	}
	rules := map[string][]*Rule{}
	var conditional, unconditional []string
	for i := range p.Rules {
		r := &p.Rules[i]
		for _, n := range r.Names {
			if !known(n) {
				return nil, fmt.Errorf("seccomp profile: unknown system call %q", n)
			}
			if _, ok := a.Number(n); !ok {
				continue
			}
			if _, seen := rules[n]; !seen {
				if len(r.Conds) > 0 {
					conditional = append(conditional, n)
				} else {
					unconditional = append(unconditional, n)
				}
			}
			rules[n] = append(rules[n], r)
		}
	}
	// Calls whose arguments are checked come first: the filter runs in full for them on
	// every call, while the allowed constant ones are cached by the kernel.
	for _, n := range append(conditional, unconditional...) {
		nr, _ := a.Number(n)
		after := as.label()
		as.jump(opJeqK, nr, next, after)
		for _, r := range rules[n] {
			nextRule := as.label()
			for _, c := range r.Conds {
				as.cond(c, nextRule)
			}
			as.ret(verdictRet(r.Action, r.Errno))
			as.mark(nextRule)
		}
		if len(rules[n][0].Conds) > 0 {
			as.ret(verdictRet(ActErrno, p.Default))
		}
		as.mark(after)
	}
	as.ret(verdictRet(ActErrno, p.Default))
	return as.assemble()
}

func verdictRet(a Action, e Errno) uint32 {
	if a == ActAllow {
		return retAllow
	}
	return retErrno | uint32(e)&0xffff
}

// cond emits the test of one condition on a 64-bit argument (two 32-bit words, low word
// first), jumping to fail when it does not hold.
func (as *assembler) cond(c Cond, fail int) {
	lo, hi := uint32(offArgs+8*c.Arg), uint32(offArgs+8*c.Arg+4)
	switch c.Op {
	case OpEqual:
		as.stmt(opLdAbs, lo)
		as.jump(opJeqK, uint32(c.Value), next, fail)
		as.stmt(opLdAbs, hi)
		as.jump(opJeqK, uint32(c.Value>>32), next, fail)
	case OpMaskedEqual:
		for _, w := range []struct {
			off        uint32
			mask, want uint32
		}{{lo, uint32(c.Mask), uint32(c.Value)}, {hi, uint32(c.Mask >> 32), uint32(c.Value >> 32)}} {
			if w.mask == 0 {
				continue // nothing of this word is compared (Validate: no value bits either)
			}
			as.stmt(opLdAbs, w.off)
			as.stmt(opAndK, w.mask)
			as.jump(opJeqK, w.want, next, fail)
		}
	case OpGreater:
		pass := as.label()
		as.stmt(opLdAbs, hi)
		as.jump(opJgtK, uint32(c.Value>>32), pass, next)
		as.jump(opJeqK, uint32(c.Value>>32), next, fail)
		as.stmt(opLdAbs, lo)
		as.jump(opJgtK, uint32(c.Value), next, fail)
		as.mark(pass)
	}
}

// assembler builds a classic BPF program with symbolic jump targets.
type assembler struct {
	insns  []insn
	labels []int // position of each label; -1 until marked
}

type insn struct {
	op     uint16
	k      uint32
	jt, jf int // label ids, or next
}

// next as a jump target is the following instruction.
const next = -1

func (as *assembler) label() int {
	as.labels = append(as.labels, -1)
	return len(as.labels) - 1
}

func (as *assembler) mark(l int) { as.labels[l] = len(as.insns) }

func (as *assembler) stmt(op uint16, k uint32) {
	as.insns = append(as.insns, insn{op: op, k: k, jt: next, jf: next})
}

func (as *assembler) jump(op uint16, k uint32, jt, jf int) {
	as.insns = append(as.insns, insn{op: op, k: k, jt: jt, jf: jf})
}

func (as *assembler) ret(k uint32) { as.stmt(opRetK, k) }

func (as *assembler) assemble() ([]bpf.RawInstruction, error) {
	if len(as.insns) > maxInsns {
		return nil, fmt.Errorf("seccomp program: %d instructions, the kernel takes %d", len(as.insns), maxInsns)
	}
	out := make([]bpf.RawInstruction, len(as.insns))
	for i, in := range as.insns {
		out[i] = bpf.RawInstruction{Op: in.op, K: in.k}
		if in.op&0x07 != 0x05 { // not BPF_JMP
			continue
		}
		for _, j := range []struct {
			label int
			off   *uint8
		}{{in.jt, &out[i].Jt}, {in.jf, &out[i].Jf}} {
			if j.label == next {
				continue
			}
			pos := as.labels[j.label]
			if pos < 0 {
				return nil, errors.New("seccomp program: jump to an unmarked label")
			}
			d := pos - (i + 1)
			if d < 0 || d > 255 {
				return nil, fmt.Errorf("seccomp program: jump of %d instructions at %d", d, i)
			}
			*j.off = uint8(d)
		}
	}
	return out, nil
}
