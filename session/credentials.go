package session

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/airlock-proxy/airlock/sandbox"
)

// Credentials attribute the proxied requests of a session's commands to the command that
// made them: each command runs with HTTP_PROXY=http://EXEC:SECRET@127.0.0.1:3128, and the
// proxy (proxy.Options.Execs) asks ExecOf about the credential a request presents on its
// sandbox's own listener. A credential stays valid until its sandbox ends, so that what a
// command leaves running is still attributed to it. It attributes; it does not authorise
// (the listener already says which sandbox is calling).
type Credentials struct {
	mu sync.RWMutex
	m  map[string]map[string][32]byte // sandbox id → exec id → sha256(secret)
}

// NewCredentials returns an empty set.
func NewCredentials() *Credentials { return &Credentials{m: map[string]map[string][32]byte{}} }

// issue makes the credential of exec in sandbox and returns its proxy URL.
func (c *Credentials) issue(sandboxID, execID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := hex.EncodeToString(b[:])
	c.mu.Lock()
	if c.m[sandboxID] == nil {
		c.m[sandboxID] = map[string][32]byte{}
	}
	c.m[sandboxID][execID] = sha256.Sum256([]byte(secret))
	c.mu.Unlock()
	return fmt.Sprintf("http://%s:%s@127.0.0.1:%d", execID, secret, sandbox.ProxyPort)
}

// ExecOf implements proxy.ExecCredentials.
func (c *Credentials) ExecOf(sandboxID, user, secret string) (string, bool) {
	c.mu.RLock()
	h, ok := c.m[sandboxID][user]
	c.mu.RUnlock()
	if !ok {
		return "", false
	}
	got := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], h[:]) != 1 {
		return "", false
	}
	return user, true
}

// dropSandbox forgets the credentials of a sandbox that ended.
func (c *Credentials) dropSandbox(sandboxID string) {
	c.mu.Lock()
	delete(c.m, sandboxID)
	c.mu.Unlock()
}

// Len is the number of sandboxes with credentials (for leak checks).
func (c *Credentials) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
