package docker

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-proxy/airlock/sandbox/seccomp"
)

// seccompProfiles are the sandbox policy (sandbox/seccomp, which the native backend
// compiles too) rendered as Docker's seccomp profile JSON, without and with AIO: an
// allowlist refusing every other call, for this build's architecture only, so that
// libseccomp kills a call through any other ABI.
func seccompProfiles() ([2]string, error) {
	var out [2]string
	a, err := seccomp.Native()
	if err != nil {
		return out, err
	}
	for i, aio := range []bool{false, true} {
		s, err := seccomp.Sandbox(seccomp.Options{AllowAIO: aio}).OCI(a)
		if err != nil {
			return out, fmt.Errorf("seccomp profile: %w", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			return out, fmt.Errorf("seccomp profile: %w", err)
		}
		out[i] = string(b)
	}
	return out, nil
}

// seccompOpt is the security option that applies the profile.
func (b *Backend) seccompOpt(allowAIO bool) string {
	if allowAIO {
		return "seccomp=" + b.seccomp[1]
	}
	return "seccomp=" + b.seccomp[0]
}
