package seccomp

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// The compiled program runs here on golang.org/x/net/bpf's virtual machine with
// hand-built seccomp_data, independently of the kernel (the e2e escape suites run it in
// real sandboxes).

// vm runs a compiled program.
type vm struct {
	t  *testing.T
	vm *bpf.VM
}

func compile(t *testing.T, p *Profile, a *Arch) *vm {
	t.Helper()
	raw, err := p.BPF(a)
	if err != nil {
		t.Fatalf("compile for %s: %v", a.Name, err)
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("%s: the program has instructions x/net/bpf cannot run", a.Name)
	}
	m, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatalf("%s: %v", a.Name, err)
	}
	return &vm{t: t, vm: m}
}

// run evaluates one call: the virtual machine reads big-endian words, so each 32-bit word
// of seccomp_data is written big-endian at the offset the kernel gives it (arguments low
// word first, as on the little-endian architectures the policy is built for).
func (v *vm) run(audit, nr uint32, args [6]uint64) uint32 {
	v.t.Helper()
	var b [64]byte
	binary.BigEndian.PutUint32(b[offNr:], nr)
	binary.BigEndian.PutUint32(b[offArch:], audit)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[offArgs+8*i+4:], uint32(a>>32))
	}
	r, err := v.vm.Run(b[:])
	if err != nil {
		v.t.Fatalf("run nr %d: %v", nr, err)
	}
	return uint32(r)
}

func retOf(v verdict) uint32 {
	if v.Action == actKill {
		return retKillProcess
	}
	return verdictRet(v.Action, v.Errno)
}

func describe(r uint32) string {
	switch {
	case r == retAllow:
		return "allow"
	case r == retKillProcess:
		return "kill"
	case r&0xffff0000 == retErrno:
		return fmt.Sprintf("errno %d", r&0xffff)
	}
	return fmt.Sprintf("%#x", r)
}

const (
	sIFIFO     = 0o010000
	oRDWR      = 0o2
	oDirectory = 0o200000
	cloneFiles = 0x400
	sigchld    = 17
	hi         = uint64(1) << 32
)

// TestContract states, call by call, what the policy promises on x86_64 and arm64.
func TestContract(t *testing.T) {
	type call struct {
		name string
		args [6]uint64
		want verdict
		aio  bool // with Options.AllowAIO
	}
	allow := verdict{Action: ActAllow}
	errno := func(e Errno) verdict { return verdict{Action: ActErrno, Errno: e} }
	calls := []call{
		{"read", [6]uint64{}, allow, false},
		{"chmod", [6]uint64{0, 0o755}, allow, false},
		{"chmod", [6]uint64{0, 0o4755}, errno(EPERM), false},
		{"chmod", [6]uint64{0, 0o2755}, errno(EPERM), false},
		{"chmod", [6]uint64{0, hi | 0o6755}, errno(EPERM), false},
		{"fchmod", [6]uint64{3, 0o4755}, errno(EPERM), false},
		{"fchmod", [6]uint64{3, 0o1777}, allow, false},
		{"fchmodat", [6]uint64{3, 0, 0o4755}, errno(EPERM), false},
		{"fchmodat2", [6]uint64{3, 0, 0o2700, 0}, errno(EPERM), false},
		{"fchmodat2", [6]uint64{3, 0, 0o700, 0}, allow, false},
		{"creat", [6]uint64{0, 0o4755}, errno(EPERM), false},
		{"creat", [6]uint64{0, 0o644}, allow, false},
		{"open", [6]uint64{0, oCreat | oRDWR, 0o4755}, errno(EPERM), false},
		{"open", [6]uint64{0, oRDWR, 0o4755}, allow, false}, // no O_CREAT: the mode is not used
		{"openat", [6]uint64{3, 0, oCreat | oRDWR, 0o4755}, errno(EPERM), false},
		{"openat", [6]uint64{3, 0, oCreat | oRDWR, 0o2755}, errno(EPERM), false},
		{"openat", [6]uint64{3, 0, oTmpfile | oDirectory | oRDWR, 0o4755}, errno(EPERM), false},
		{"openat", [6]uint64{3, 0, oCreat | oRDWR, 0o755}, allow, false},
		{"openat", [6]uint64{3, 0, 0, 0o6777}, allow, false},
		{"openat", [6]uint64{3, 0, hi | oCreat, hi | 0o4000}, errno(EPERM), false},
		{"mkdir", [6]uint64{0, 0o2775}, errno(EPERM), false},
		{"mkdirat", [6]uint64{3, 0, 0o4700}, errno(EPERM), false},
		{"mkdirat", [6]uint64{3, 0, 0o755}, allow, false},
		{"mknod", [6]uint64{0, sIFIFO | 0o4644}, errno(EPERM), false},
		{"mknodat", [6]uint64{3, 0, sIFIFO | 0o2644}, errno(EPERM), false},
		{"mknodat", [6]uint64{3, 0, sIFIFO | 0o644}, allow, false},
		{"setxattr", [6]uint64{}, errno(EOPNOTSUPP), false},
		{"lsetxattr", [6]uint64{}, errno(EOPNOTSUPP), false},
		{"fsetxattr", [6]uint64{}, errno(EOPNOTSUPP), false},
		{"setxattrat", [6]uint64{}, errno(EOPNOTSUPP), false},
		{"getxattr", [6]uint64{}, allow, false},
		{"removexattr", [6]uint64{}, allow, false},
		{"socket", [6]uint64{afUnix, 1}, allow, false},
		{"socket", [6]uint64{afInet, 1}, allow, false},
		{"socket", [6]uint64{afInet6, 2}, allow, false},
		{"socket", [6]uint64{40, 1}, errno(EAFNOSUPPORT), false}, // AF_VSOCK
		{"socket", [6]uint64{16, 3}, errno(EAFNOSUPPORT), false}, // AF_NETLINK
		{"socket", [6]uint64{17, 3}, errno(EAFNOSUPPORT), false}, // AF_PACKET
		{"socket", [6]uint64{0, 1}, errno(EAFNOSUPPORT), false},
		{"socket", [6]uint64{hi | afInet, 1}, errno(EAFNOSUPPORT), false},
		{"socket", [6]uint64{hi | 40, 1}, errno(EAFNOSUPPORT), false},
		{"socketpair", [6]uint64{afUnix, 1}, allow, false},
		{"socketpair", [6]uint64{afInet, 1}, errno(EAFNOSUPPORT), false},
		{"clone", [6]uint64{sigchld}, allow, false},
		{"clone", [6]uint64{0x10000000 | sigchld}, errno(EPERM), false}, // CLONE_NEWUSER
		{"clone", [6]uint64{0x40000000 | sigchld}, errno(EPERM), false}, // CLONE_NEWNET
		{"clone", [6]uint64{0x00020000 | sigchld}, errno(EPERM), false}, // CLONE_NEWNS
		{"unshare", [6]uint64{cloneFiles}, errno(EPERM), false},
		{"unshare", [6]uint64{0x10000000}, errno(EPERM), false},
		{"clone", [6]uint64{cloneFiles | sigchld}, allow, false},
		{"clone3", [6]uint64{}, errno(ENOSYS), false},
		{"openat2", [6]uint64{}, errno(ENOSYS), false},
		{"setns", [6]uint64{}, errno(EPERM), false},
		{"ptrace", [6]uint64{16, 1}, errno(EPERM), false},
		{"process_vm_readv", [6]uint64{}, errno(EPERM), false},
		{"pidfd_getfd", [6]uint64{}, errno(EPERM), false},
		{"keyctl", [6]uint64{}, errno(EPERM), false},
		{"add_key", [6]uint64{}, errno(EPERM), false},
		{"request_key", [6]uint64{}, errno(EPERM), false},
		{"bpf", [6]uint64{}, errno(EPERM), false},
		{"perf_event_open", [6]uint64{}, errno(EPERM), false},
		{"userfaultfd", [6]uint64{}, errno(EPERM), false},
		{"io_uring_setup", [6]uint64{}, errno(EPERM), false},
		{"io_uring_enter", [6]uint64{}, errno(EPERM), false},
		{"mount", [6]uint64{}, errno(EPERM), false},
		{"fsopen", [6]uint64{}, errno(EPERM), false},
		{"open_tree", [6]uint64{}, errno(EPERM), false},
		{"init_module", [6]uint64{}, errno(EPERM), false},
		{"io_setup", [6]uint64{}, errno(ENOSYS), false},
		{"io_submit", [6]uint64{}, errno(ENOSYS), false},
		{"io_setup", [6]uint64{}, allow, true},
		{"io_getevents", [6]uint64{}, allow, true},
		{"personality", [6]uint64{0xffffffff}, allow, false},
		{"personality", [6]uint64{0x0400000}, errno(ENOSYS), false}, // READ_IMPLIES_EXEC
		{"lsm_get_self_attr", [6]uint64{}, errno(ENOSYS), false},    // not named: the default
	}
	for _, a := range []*Arch{AMD64, ARM64} {
		progs := map[bool]*vm{false: compile(t, Sandbox(Options{}), a), true: compile(t, Sandbox(Options{AllowAIO: true}), a)}
		for _, c := range calls {
			nr, ok := a.Number(c.name)
			if !ok {
				continue // open, chmod, mkdir... do not exist on arm64
			}
			t.Run(fmt.Sprintf("%s/%s%v", a.Name, c.name, c.args[:4]), func(t *testing.T) {
				got := progs[c.aio].run(a.Audit, nr, c.args)
				if want := retOf(c.want); got != want {
					t.Errorf("got %s, want %s", describe(got), describe(want))
				}
			})
		}
	}
}

// TestForeignABIsAreKilled: every call through i386 (int $0x80) or x32 on x86_64, and
// through arm32 on arm64, kills the process, whatever its number and arguments.
func TestForeignABIsAreKilled(t *testing.T) {
	p := Sandbox(Options{AllowAIO: true})
	amd, arm := compile(t, p, AMD64), compile(t, p, ARM64)
	args := [6]uint64{0, 0o755, 0, 0, 0, 0}
	for nr := uint32(0); nr < 1024; nr++ {
		for _, c := range []struct {
			vm          *vm
			audit, nr   uint32
			description string
		}{
			{amd, uint32(arch.I386.ID), nr, "i386"},
			{amd, uint32(arch.X86_64.ID), x32Bit | nr, "x32"},
			{amd, uint32(arch.X86_64.ID), x32Bit | 0x3fffffff&^nr, "x32, high numbers"},
			{amd, uint32(arch.AARCH64.ID), nr, "aarch64 on amd64"},
			{arm, uint32(arch.ARM.ID), nr, "arm32"},
			{arm, uint32(arch.X86_64.ID), nr, "x86_64 on arm64"},
		} {
			if got := c.vm.run(c.audit, c.nr, args); got != retKillProcess {
				t.Fatalf("%s call %#x: got %s, want kill", c.description, c.nr, describe(got))
			}
		}
	}
	for _, nr := range []uint32{0xffffffff, 0x80000000, 0xc0000000 | 90} {
		if got := amd.run(uint32(arch.X86_64.ID), nr, args); got != retKillProcess {
			t.Errorf("x86_64 call %#x: got %s, want kill", nr, describe(got))
		}
	}
	// The i386 numbers of the calls the 64-bit policy refuses, named: chmod, socketcall,
	// socket, ptrace, keyctl, io_uring_setup, bpf, unshare, mount, setxattr, clone.
	for name, nr := range map[string]uint32{"chmod": 15, "socketcall": 102, "socket": 359,
		"ptrace": 26, "keyctl": 288, "io_uring_setup": 425, "bpf": 357, "unshare": 310,
		"mount": 21, "setxattr": 226, "clone": 120, "io_setup": 245} {
		if n, ok := arch.I386.SyscallNames[name]; !ok || uint32(n) != nr {
			t.Errorf("i386 %s is %d in the table, want %d", name, n, nr)
		}
	}
}

// argSamples are values of one argument that exercise conds: each compared value, each
// mask bit alone and together, and values that differ only in the high word.
func argSamples(conds []Cond) []uint64 {
	s := []uint64{0, 1, 2, 0xff, 0xffffffff, ^uint64(0), hi, hi | 1}
	for _, c := range conds {
		for _, v := range []uint64{c.Value, c.Value + 1, c.Value - 1, c.Mask, c.Value | c.Mask, c.Mask &^ c.Value} {
			s = append(s, v, v|hi, v&0xffffffff)
		}
		for b := uint64(1); b != 0; b <<= 1 {
			if c.Mask&b != 0 {
				s = append(s, b, b|0o644)
			}
		}
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// samples are argument vectors for a call: the product of each compared argument's
// samples (a call compares at most two arguments).
func samples(rules []*Rule) [][6]uint64 {
	per := map[uint][]Cond{}
	for _, r := range rules {
		for _, c := range r.Conds {
			per[c.Arg] = append(per[c.Arg], c)
		}
	}
	out := [][6]uint64{{}}
	for arg, conds := range per {
		var grown [][6]uint64
		for _, v := range argSamples(conds) {
			for _, a := range out {
				a[arg] = v
				grown = append(grown, a)
			}
		}
		out = grown
	}
	return out
}

func rulesByName(p *Profile) map[string][]*Rule {
	m := map[string][]*Rule{}
	for i := range p.Rules {
		for _, n := range p.Rules[i].Names {
			m[n] = append(m[n], &p.Rules[i])
		}
	}
	return m
}

// TestProgramMeansTheRules runs every system call of each architecture's table, with
// argument samples around every condition, through the compiled program and compares the
// result with the rules' meaning (decide).
func TestProgramMeansTheRules(t *testing.T) {
	for _, o := range []Options{{}, {AllowAIO: true}} {
		p := Sandbox(o)
		byName := rulesByName(p)
		for _, a := range []*Arch{AMD64, ARM64} {
			prog := compile(t, p, a)
			for nr, name := range a.table.SyscallNumbers {
				for _, args := range samples(byName[name]) {
					want := retOf(p.decide(name, args))
					if got := prog.run(a.Audit, uint32(nr), args); got != want {
						t.Fatalf("%s %s(%#x): got %s, want %s", a.Name, name, args, describe(got), describe(want))
					}
				}
			}
			for _, nr := range []uint32{uint32(len(a.table.SyscallNumbers) + 600), 0x3fffffff} {
				if got := prog.run(a.Audit, nr, [6]uint64{}); got != verdictRet(ActErrno, ENOSYS) {
					t.Errorf("%s unknown call %d: got %s, want ENOSYS", a.Name, nr, describe(got))
				}
			}
		}
	}
}

// TestConditionalRulesAgree: for every call with conditions, no arguments meet two rules
// of different verdicts (so the order libseccomp evaluates them in does not matter), and,
// but for personality, every argument meets one (the refusal's error is the rule's, not
// the default's).
func TestConditionalRulesAgree(t *testing.T) {
	p := Sandbox(Options{})
	for name, rules := range rulesByName(p) {
		if len(rules[0].Conds) == 0 {
			continue
		}
		for _, args := range samples(rules) {
			var verdicts []verdict
			for _, r := range rules {
				if r.matches(args) {
					verdicts = append(verdicts, verdict{Action: r.Action, Errno: r.Errno})
				}
			}
			if len(verdicts) == 0 && name != "personality" {
				t.Errorf("%s(%#x): no rule matches", name, args)
			}
			for _, v := range verdicts[min(1, len(verdicts)):] {
				if v != verdicts[0] {
					t.Errorf("%s(%#x): rules disagree: %v", name, args, verdicts)
				}
			}
		}
	}
}

func TestProfileShape(t *testing.T) {
	for _, o := range []Options{{}, {AllowAIO: true}} {
		if err := Sandbox(o).Validate(); err != nil {
			t.Fatal(err)
		}
	}
	bad := []Profile{
		{Default: ENOSYS, Rules: []Rule{{Names: []string{"read"}, Action: ActAllow}, {Names: []string{"read"}, Action: ActErrno, Errno: EPERM}}},
		{Default: ENOSYS, Rules: []Rule{{Names: []string{"read"}, Action: ActErrno}}},
		{Default: ENOSYS, Rules: []Rule{{Names: []string{"read"}, Action: "trace"}}},
		{Default: ENOSYS, Rules: []Rule{{Names: []string{"socket"}, Action: ActAllow, Conds: []Cond{{Arg: 0, Op: OpGreater, Value: 1}, {Arg: 0, Op: OpEqual, Value: 3}}}}},
		{Default: ENOSYS, Rules: []Rule{{Names: []string{"socket"}, Action: ActAllow, Conds: []Cond{{Arg: 6, Op: OpEqual}}}}},
		{Default: ENOSYS, Rules: []Rule{{Names: []string{"chmod"}, Action: ActAllow, Conds: []Cond{{Arg: 1, Op: OpMaskedEqual, Mask: 1, Value: 2}}}}},
		{Rules: []Rule{{Names: []string{"read"}, Action: ActAllow}}},
	}
	for i, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("profile %d: validated, want an error", i)
		}
	}
	typo := &Profile{Default: ENOSYS, Rules: []Rule{{Names: []string{"chmdo"}, Action: ActAllow}}}
	if _, err := typo.BPF(AMD64); err == nil {
		t.Error("a misspelt call compiled")
	}
	if _, err := typo.OCI(AMD64); err == nil {
		t.Error("a misspelt call rendered")
	}
}

// TestAllowedCallsAreConstant: the program decides an unconditionally allowed call on its
// number alone, so the kernel's filter cache can skip it (it emulates the program with
// the number and architecture only); checked here by running them with every argument
// word set.
func TestAllowedCallsAreConstant(t *testing.T) {
	p := Sandbox(Options{})
	prog := compile(t, p, AMD64)
	for _, r := range p.Rules {
		if r.Action != ActAllow || len(r.Conds) > 0 {
			continue
		}
		for _, n := range r.Names {
			nr, ok := AMD64.Number(n)
			if !ok {
				continue
			}
			ones := [6]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
			if got := prog.run(AMD64.Audit, nr, ones); got != retAllow {
				t.Errorf("%s: got %s", n, describe(got))
			}
		}
	}
}
