package sandbox

import (
	"fmt"
	"strings"
)

// DefaultPath is PATH inside a sandbox.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// caVariables point common clients at the sandbox's CA bundle. The usual list, plus
// npm_config_cafile: npm reads no other variable, and outside Debian (whose /etc/npmrc
// names the system bundle) it would not trust airlock's CA.
var caVariables = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT", "npm_config_cafile"}

// baseEnv builds a sandbox's environment from nothing: no variable of the parent is
// inherited. The image's environment (Options.Image) lies under it; explicit Options.Env
// entries come last and win.
func baseEnv(o Options) []string {
	proxy := fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)
	env := []string{
		"PATH=" + DefaultPath,
		"HOME=" + HomeDir,
		"LANG=C.UTF-8",
		"USER=sandbox",
		"TMPDIR=/tmp",
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy,
		"http_proxy=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=", "no_proxy=",
		"NODE_USE_ENV_PROXY=1",
	}
	if len(o.CABundle) > 0 {
		for _, v := range caVariables {
			env = append(env, v+"="+CABundlePath)
		}
	}
	return MergeEnv(imageEnv(o.Image, env), o.Env)
}

func validEnv(kv string) bool {
	k, _, ok := strings.Cut(kv, "=")
	return ok && k != ""
}

// MergeEnv returns base with the entries of extra added, an extra entry replacing a base
// entry of the same name.
func MergeEnv(base, extra []string) []string {
	out := append([]string(nil), base...)
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i, old := range out {
			if ok, _, _ := strings.Cut(old, "="); ok == k {
				out[i] = kv
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return out
}
