package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

// A secretFile is a file the config names that holds a secret, and the key naming it.
type secretFile struct{ key, path string }

// secretFiles are the files of the config that hold secrets: tokens (approvers', issuers',
// the approval service's, Vault's, the sandbox backends'), keys (the proxy credentials'
// HMAC key, the audit signing key), Vault's AppRole secret id and Kubernetes JWT, and
// credentials read from files. Public files (CA certificates, the bundle's public key)
// are not among them.
func (c *Config) secretFiles() []secretFile {
	var out []secretFile
	add := func(key, path string) {
		if path != "" {
			out = append(out, secretFile{key, path})
		}
	}
	for i, a := range c.Approvals.Approvers {
		add(fmt.Sprintf("approvals.approvers[%d].token_file", i), a.TokenFile)
	}
	add("approvals.service_token_file", c.Approvals.ServiceTokenFile)
	add("upstream_proxy_auth.file", c.UpstreamProxyAuth.File)
	add("proxy.token_key_file", c.Proxy.TokenKeyFile)
	for i, is := range c.Proxy.Issuers {
		add(fmt.Sprintf("proxy.issuers[%d].token_file", i), is.TokenFile)
	}
	add("audit.signing_key_file", c.Audit.SigningKeyFile)
	add("vault.auth.token_file", c.Vault.Auth.TokenFile)
	add("vault.auth.secret_id_file", c.Vault.Auth.SecretIDFile)
	add("vault.auth.jwt_path", c.Vault.Auth.JWTPath)
	add("sandbox.docker.token_file", c.Sandbox.Docker.TokenFile)
	add("sandbox.kubernetes.token_file", c.Sandbox.Kubernetes.TokenFile)
	names := make([]string, 0, len(c.Credentials))
	for name := range c.Credentials {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		add("credentials."+name+".file", c.Credentials[name].File)
	}
	return out
}

// checkSecretFiles refuses a secret file that others may read, as ssh refuses such a
// private key: one readable by group or others when airlock's own user owns it (a file
// written with the usual umask 022), or by anyone at all whoever owns it. A sandbox sees
// much of the host's file system (/etc, /opt, /usr, the workspace): airlock hides its own
// files there (hiddenPaths), but not other links to them, and other users and processes
// see them too. A file that does not exist is left to the code that reads it.
func checkSecretFiles(files []secretFile) error {
	var errs []error
	euid := uint32(os.Geteuid())
	for _, f := range files {
		fi, err := os.Stat(f.path)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		mode := fi.Mode().Perm()
		if mode&0o004 != 0 || st.Uid == euid && mode&0o077 != 0 {
			errs = append(errs, fmt.Errorf("%s: %s may be read by group or others (mode %04o): a secret file must be readable by its owner alone (chmod 600 %s; an orchestrator's secret volume with mode 0400 or 0440)",
				f.key, f.path, mode, f.path))
		}
	}
	return errors.Join(errs...)
}

// hiddenPaths are the host paths a sandbox must not read: the config file, every secret
// file it names, $AIRLOCK_HOME (the CA's key, the approval store, the audit log, the lease
// journal), sessions.state_dir (every session's record, with the env values it was
// created with, and its execs' argv: the airlock user's, which a rootless sandbox is) and
// a rootless airlock's state directory.
func (c *Config) hiddenPaths(configFile string) []string {
	var out []string
	abs := func(p string) {
		if p == "" {
			return
		}
		if a, err := filepath.Abs(p); err == nil {
			out = append(out, a)
		}
	}
	abs(configFile)
	for _, f := range c.secretFiles() {
		abs(f.path)
	}
	abs(c.Home)
	abs(c.Sessions.StateDir)
	// And, when sessions.state_dir is unset, the defaults of an ordinary user's airlock:
	// $XDG_RUNTIME_DIR/airlock, else ~/.local/state/airlock/run, holding its sessions'
	// records and its sandboxes' state, which a sandbox whose workspace is the user's home
	// would otherwise read and write (its processes are that user).
	if c.Sessions.StateDir == "" {
		abs(session.DefaultStateDirForUser())
	}
	abs(native.RootlessStateDir())
	return out
}
