package docker

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompProfile is Docker's default profile (the current one, whatever the daemon's age)
// with socket() narrowed to the families the native backend allows: AF_UNIX, AF_INET and
// AF_INET6. AF_VSOCK in particular is not confined by a network namespace (older daemons'
// own default profile allows it); AF_NETLINK and AF_PACKET have no use in a sandbox.
func seccompProfile() (string, error) {
	p := seccomp.DefaultProfile()
	var rules []*seccomp.Syscall
	for _, s := range p.Syscalls {
		if slices.Contains(s.Names, "socket") {
			names := slices.DeleteFunc(slices.Clone(s.Names), func(n string) bool { return n == "socket" })
			if len(names) == 0 {
				continue
			}
			c := *s
			c.Names = names
			s = &c
		}
		rules = append(rules, s)
	}
	for _, fam := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6} {
		rules = append(rules, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
			Names: []string{"socket"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: fam, Op: specs.OpEqualTo}},
		}})
	}
	p.Syscalls = rules
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("seccomp profile: %w", err)
	}
	return string(b), nil
}
