package seccomp

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ociDecide evaluates a rendered profile as runc and libseccomp do: a rule applies when all
// its argument comparisons hold (runc makes alternatives of several comparisons of one
// argument: the test fails on those instead), the matching rules must agree, and a call
// no rule matches gets the default.
func ociDecide(t *testing.T, s *specs.LinuxSeccomp, name string, args [6]uint64) verdict {
	t.Helper()
	var got []verdict
	for _, r := range s.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		var seen [6]bool
		ok := true
		for _, a := range r.Args {
			if seen[a.Index] {
				t.Fatalf("%s: two comparisons of argument %d in one rule", name, a.Index)
			}
			seen[a.Index] = true
			v := args[a.Index]
			switch a.Op {
			case specs.OpEqualTo:
				ok = ok && v == a.Value
			case specs.OpGreaterThan:
				ok = ok && v > a.Value
			case specs.OpMaskedEqual:
				ok = ok && v&a.Value == a.ValueTwo
			default:
				t.Fatalf("%s: comparison %s", name, a.Op)
			}
		}
		if !ok {
			continue
		}
		switch r.Action {
		case specs.ActAllow:
			got = append(got, verdict{Action: ActAllow})
		case specs.ActErrno:
			got = append(got, verdict{Action: ActErrno, Errno: Errno(*r.ErrnoRet)})
		default:
			t.Fatalf("%s: action %s", name, r.Action)
		}
	}
	for _, v := range got {
		if v != got[0] {
			t.Fatalf("%s(%#x): rendered rules disagree: %v", name, args, got)
		}
	}
	if len(got) == 0 {
		return verdict{Action: ActErrno, Errno: Errno(*s.DefaultErrnoRet)}
	}
	return got[0]
}

// TestOCIMeansTheRules: the profile Docker gets decides every call of the architecture's
// table, with argument samples around every condition, as the compiled program does.
func TestOCIMeansTheRules(t *testing.T) {
	for _, o := range []Options{{}, {AllowAIO: true}} {
		p := Sandbox(o)
		byName := rulesByName(p)
		for _, a := range []*Arch{AMD64, ARM64} {
			s, err := p.OCI(a)
			if err != nil {
				t.Fatal(err)
			}
			if s.DefaultAction != specs.ActErrno || *s.DefaultErrnoRet != uint(ENOSYS) {
				t.Errorf("default %s %d, want errno ENOSYS", s.DefaultAction, *s.DefaultErrnoRet)
			}
			if !slices.Equal(s.Architectures, []specs.Arch{specs.Arch(a.OCI)}) {
				t.Errorf("architectures %v, want only %s", s.Architectures, a.OCI)
			}
			for _, name := range a.table.SyscallNumbers {
				for _, args := range samples(byName[name]) {
					want := p.decide(name, args)
					if got := ociDecide(t, s, name, args); got != want {
						t.Fatalf("%s %s(%#x): got %v, want %v", a.Name, name, args, got, want)
					}
				}
			}
		}
	}
}

// TestOCIJSON pins the JSON spelling Docker reads.
func TestOCIJSON(t *testing.T) {
	s, err := Sandbox(Options{}).OCI(AMD64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		DefaultAction   string   `json:"defaultAction"`
		DefaultErrnoRet int      `json:"defaultErrnoRet"`
		Architectures   []string `json:"architectures"`
		Syscalls        []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *int     `json:"errnoRet"`
			Args     []struct {
				Index    int    `json:"index"`
				Value    uint64 `json:"value"`
				ValueTwo uint64 `json:"valueTwo"`
				Op       string `json:"op"`
			} `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.DefaultAction != "SCMP_ACT_ERRNO" || doc.DefaultErrnoRet != 38 || !slices.Equal(doc.Architectures, []string{"SCMP_ARCH_X86_64"}) {
		t.Errorf("header: %s %d %v", doc.DefaultAction, doc.DefaultErrnoRet, doc.Architectures)
	}
	found := map[string]bool{}
	for _, r := range doc.Syscalls {
		key := fmt.Sprint(r.Names, r.Action)
		if r.ErrnoRet != nil {
			key += fmt.Sprint(*r.ErrnoRet)
		}
		for _, a := range r.Args {
			key += fmt.Sprintf(" %d %s %#o %#o", a.Index, a.Op, a.Value, a.ValueTwo)
		}
		found[key] = true
	}
	for _, want := range []string{
		"[chmod]SCMP_ACT_ALLOW 1 SCMP_CMP_MASKED_EQ 06000 0",
		"[chmod]SCMP_ACT_ERRNO1 1 SCMP_CMP_MASKED_EQ 04000 04000",
		"[socket]SCMP_ACT_ERRNO97 0 SCMP_CMP_GT 012 0",
		"[setxattr lsetxattr fsetxattr setxattrat]SCMP_ACT_ERRNO95",
		"[io_setup io_destroy io_submit io_cancel io_getevents io_pgetevents]SCMP_ACT_ERRNO38",
	} {
		if !found[want] {
			t.Errorf("no rule %q", want)
		}
	}
}
