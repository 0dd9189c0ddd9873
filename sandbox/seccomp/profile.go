// Package seccomp is the system-call policy of every sandbox, kept as data: one allowlist
// (allowlist.go) that the native backend compiles to a BPF program (BPF) and the Docker
// backend renders as an OCI seccomp profile (OCI), so that both refuse the same calls with
// the same errors.
//
// The policy refuses by default. Before any rule, the architecture is checked: a call made
// through any ABI but the build's native one (i386 `int $0x80` or x32 on x86_64, arm32 on
// arm64) kills the process. A call the allowlist does not name fails with ENOSYS, as on a
// kernel without it, so that libc and language runtimes fall back to an older call (clone3
// to clone, openat2 to openat, fchmodat2 to fchmodat) or report it. Calls refused on purpose
// get the error a program expects: EPERM for privileged operations, EAFNOSUPPORT for a
// socket family, EOPNOTSUPP for extended attributes.
//
// The package has no dependency on the host's operating system: it describes Linux.
package seccomp

import (
	"errors"
	"fmt"
	"slices"
)

// Action is what a rule does to a matching call.
type Action string

// Actions.
const (
	ActAllow Action = "allow" // the call runs
	ActErrno Action = "errno" // the call fails with Rule.Errno without running
)

// Errno is a Linux error number (the generic table of x86_64 and arm64).
type Errno uint32

// Error numbers the policy returns.
const (
	EPERM        Errno = 1
	ENOSYS       Errno = 38
	EOPNOTSUPP   Errno = 95
	EAFNOSUPPORT Errno = 97
)

// Op compares one 64-bit system-call argument.
type Op string

// Comparisons. They are those libseccomp has, so that a rule means the same thing compiled
// here and rendered for Docker.
const (
	OpEqual       Op = "eq"        // arg == Value
	OpGreater     Op = "gt"        // arg > Value, unsigned
	OpMaskedEqual Op = "masked_eq" // arg & Mask == Value
)

// Cond is one condition on an argument.
type Cond struct {
	Arg   uint // 0 to 5
	Op    Op
	Value uint64
	Mask  uint64 // OpMaskedEqual only
}

// A Rule applies Action to each named call whose arguments meet all of Conds.
//
// A call has either one unconditional rule or only conditional ones; its conditional rules
// are written so that no arguments meet two rules of different actions (libseccomp, which
// Docker's runtime uses, does not promise an order between them), and arguments that meet
// none get the default (ENOSYS). A rule has at most one condition per argument (runc turns
// several conditions on one argument into alternatives).
type Rule struct {
	Names  []string
	Action Action
	Errno  Errno // ActErrno only
	Conds  []Cond
}

// Profile is a complete policy: its rules and the error of every call they do not name.
type Profile struct {
	Rules   []Rule
	Default Errno
}

// Options select the optional parts of the sandbox policy.
type Options struct {
	// AllowAIO permits Linux AIO (io_setup and its family). AIO contexts are a
	// machine-wide resource (fs.aio-max-nr) with no per-namespace or per-cgroup limit, so
	// one sandbox could take them all; without it io_setup fails with ENOSYS, as on a
	// kernel built without AIO, and programs use their thread-pool I/O instead.
	AllowAIO bool
}

// Validate checks the profile's shape: known actions and comparisons, an error number for
// each refusal, at most one condition per argument of a rule, and no call with both an
// unconditional rule and another rule.
func (p *Profile) Validate() error {
	if p.Default == 0 {
		return errors.New("seccomp profile: no default error number")
	}
	kind := map[string]string{} // name → "unconditional" or "conditional"
	var errs []error
	for i, r := range p.Rules {
		where := fmt.Sprintf("rule %d %v", i, r.Names)
		switch r.Action {
		case ActAllow:
			if r.Errno != 0 {
				errs = append(errs, fmt.Errorf("%s: an allow rule has no error number", where))
			}
		case ActErrno:
			if r.Errno == 0 {
				errs = append(errs, fmt.Errorf("%s: a refusal needs an error number", where))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: action %q", where, r.Action))
		}
		if len(r.Names) == 0 {
			errs = append(errs, fmt.Errorf("%s: no system calls", where))
		}
		var seen [6]bool
		for _, c := range r.Conds {
			switch {
			case c.Arg > 5:
				errs = append(errs, fmt.Errorf("%s: argument %d", where, c.Arg))
				continue
			case seen[c.Arg]:
				errs = append(errs, fmt.Errorf("%s: two conditions on argument %d", where, c.Arg))
			}
			seen[c.Arg] = true
			switch c.Op {
			case OpEqual, OpGreater:
			case OpMaskedEqual:
				if c.Value&^c.Mask != 0 {
					errs = append(errs, fmt.Errorf("%s: value %#x has bits outside mask %#x", where, c.Value, c.Mask))
				}
			default:
				errs = append(errs, fmt.Errorf("%s: comparison %q", where, c.Op))
			}
		}
		k := "conditional"
		if len(r.Conds) == 0 {
			k = "unconditional"
		}
		for _, n := range r.Names {
			if prev, ok := kind[n]; ok && (prev == "unconditional" || k == "unconditional") {
				errs = append(errs, fmt.Errorf("%s: %s has an unconditional rule and another rule", where, n))
			}
			kind[n] = k
		}
	}
	return errors.Join(errs...)
}

// matches reports whether args meet every condition of r.
func (r *Rule) matches(args [6]uint64) bool {
	for _, c := range r.Conds {
		a := args[c.Arg]
		var ok bool
		switch c.Op {
		case OpEqual:
			ok = a == c.Value
		case OpGreater:
			ok = a > c.Value
		case OpMaskedEqual:
			ok = a&c.Mask == c.Value
		}
		if !ok {
			return false
		}
	}
	return true
}

// verdict is what the policy does to one call.
type verdict struct {
	Action Action // ActAllow, ActErrno, or actKill for a foreign ABI
	Errno  Errno
}

// actKill is the verdict on a call through a foreign ABI: the process is killed. It is
// never a rule's action.
const actKill Action = "kill"

// decide is the policy's meaning for a call of the native ABI, evaluated directly from the
// rules: the action of the matching rules (all of which agree, see Rule), else the
// default. The compiled program and the OCI rendering are tested against it.
func (p *Profile) decide(name string, args [6]uint64) verdict {
	for i := range p.Rules {
		r := &p.Rules[i]
		if slices.Contains(r.Names, name) && r.matches(args) {
			return verdict{Action: r.Action, Errno: r.Errno}
		}
	}
	return verdict{Action: ActErrno, Errno: p.Default}
}
