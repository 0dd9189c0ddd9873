package seccomp

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// OCI renders the profile as an OCI seccomp profile for a, in the form Docker takes with
// `--security-opt seccomp=JSON` (runc compiles it with libseccomp). Its only architecture
// is a's: libseccomp kills a call through any other ABI, x32 included on x86_64 (the
// e2e/docker escape suite checks both on the real runtime). Calls a lacks are left out.
func (p *Profile) OCI(a *Arch) (*specs.LinuxSeccomp, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	def := uint(p.Default)
	out := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &def,
		Architectures:   []specs.Arch{specs.Arch(a.OCI)},
	}
	for _, r := range p.Rules {
		var names []string
		for _, n := range r.Names {
			if !known(n) {
				return nil, fmt.Errorf("seccomp profile: unknown system call %q", n)
			}
			if _, ok := a.Number(n); ok {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		s := specs.LinuxSyscall{Names: names, Action: specs.ActAllow}
		if r.Action == ActErrno {
			e := uint(r.Errno)
			s.Action, s.ErrnoRet = specs.ActErrno, &e
		}
		for _, c := range r.Conds {
			arg := specs.LinuxSeccompArg{Index: c.Arg, Value: c.Value}
			switch c.Op {
			case OpEqual:
				arg.Op = specs.OpEqualTo
			case OpGreater:
				arg.Op = specs.OpGreaterThan
			case OpMaskedEqual:
				// libseccomp's masked equality: (arg & Value) == ValueTwo.
				arg.Op, arg.Value, arg.ValueTwo = specs.OpMaskedEqual, c.Mask, c.Value
			}
			s.Args = append(s.Args, arg)
		}
		out.Syscalls = append(out.Syscalls, s)
	}
	return out, nil
}
