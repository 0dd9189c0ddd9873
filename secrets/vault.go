package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/api/auth/approle"
	"github.com/hashicorp/vault/api/auth/kubernetes"
	"golang.org/x/sync/singleflight"
)

// vaultClient is the proxy's own authenticated Vault session.
type vaultClient struct {
	c        *api.Client
	cfg      VaultConfig
	log      *slog.Logger
	timeout  time.Duration
	onReauth func() // called after a new login replaced a lost token

	login   singleflight.Group
	gen     atomic.Uint64 // counts logins
	mu      sync.Mutex
	watcher *api.LifetimeWatcher
	wstop   chan struct{} // closed to retire the current watcher's goroutine
	stop    chan struct{}
	done    sync.WaitGroup
}

func newVaultClient(ctx context.Context, cfg VaultConfig, wrap func(http.RoundTripper) http.RoundTripper, log *slog.Logger, onReauth func()) (*vaultClient, error) {
	conf := api.DefaultConfig() // reads VAULT_ADDR, VAULT_CACERT, VAULT_MAX_RETRIES, ...
	if conf.Error != nil {
		return nil, fmt.Errorf("vault config from environment: %w", conf.Error)
	}
	if cfg.Address != "" {
		conf.Address = cfg.Address
	}
	if cfg.CACert != "" {
		if err := conf.ConfigureTLS(&api.TLSConfig{CACert: cfg.CACert}); err != nil {
			return nil, fmt.Errorf("vault.ca_cert: %w", err)
		}
	}
	if wrap != nil {
		conf.HttpClient.Transport = wrap(conf.HttpClient.Transport)
	}
	timeout := cfg.Timeout.Std()
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	conf.Timeout = timeout
	c, err := api.NewClient(conf)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	if cfg.Namespace != "" {
		c.SetNamespace(cfg.Namespace)
	}
	v := &vaultClient{c: c, cfg: cfg, log: log, timeout: timeout, onReauth: onReauth, stop: make(chan struct{})}
	if err := v.authenticate(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// authenticate logs in (or loads the token) and starts a lifetime watcher for the token.
func (v *vaultClient) authenticate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	var auth *api.Secret
	switch v.cfg.Auth.Method {
	case "", AuthToken:
		tok, err := v.readToken()
		if err != nil {
			return err
		}
		v.c.SetToken(tok)
		self, err := v.c.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			return fmt.Errorf("vault token lookup: %w", sanitize(err))
		}
		ttl, _ := self.TokenTTL()
		renewable, _ := self.TokenIsRenewable()
		if renewable && ttl > 0 {
			auth = &api.Secret{Auth: &api.SecretAuth{ClientToken: tok, Renewable: true, LeaseDuration: int(ttl.Seconds())}}
		}
	case AuthAppRole:
		var opts []approle.LoginOption
		if v.cfg.Auth.MountPath != "" {
			opts = append(opts, approle.WithMountPath(v.cfg.Auth.MountPath))
		}
		m, err := approle.NewAppRoleAuth(v.cfg.Auth.RoleID, &approle.SecretID{FromFile: v.cfg.Auth.SecretIDFile}, opts...)
		if err != nil {
			return fmt.Errorf("vault approle auth: %w", err)
		}
		v.c.ClearToken()
		if auth, err = v.c.Auth().Login(ctx, m); err != nil {
			return fmt.Errorf("vault approle login: %w", sanitize(err))
		}
	case AuthKubernetes:
		var opts []kubernetes.LoginOption
		if v.cfg.Auth.MountPath != "" {
			opts = append(opts, kubernetes.WithMountPath(v.cfg.Auth.MountPath))
		}
		if v.cfg.Auth.JWTPath != "" {
			opts = append(opts, kubernetes.WithServiceAccountTokenPath(v.cfg.Auth.JWTPath))
		}
		m, err := kubernetes.NewKubernetesAuth(v.cfg.Auth.Role, opts...)
		if err != nil {
			return fmt.Errorf("vault kubernetes auth: %w", err)
		}
		v.c.ClearToken()
		if auth, err = v.c.Auth().Login(ctx, m); err != nil {
			return fmt.Errorf("vault kubernetes login: %w", sanitize(err))
		}
	default:
		return fmt.Errorf("vault.auth.method: %q is not one of token, approle, kubernetes", v.cfg.Auth.Method)
	}
	v.gen.Add(1)
	v.log.Info("vault authenticated", "method", v.method(), "renewable", auth != nil && auth.Auth != nil && auth.Auth.Renewable)
	return v.watch(auth)
}

func (v *vaultClient) method() string {
	if v.cfg.Auth.Method == "" {
		return AuthToken
	}
	return v.cfg.Auth.Method
}

// readToken reads the token method's token from the file or VAULT_TOKEN, afresh each time.
func (v *vaultClient) readToken() (string, error) {
	if f := v.cfg.Auth.TokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("vault.auth.token_file: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("vault.auth.token_file: %s is empty", f)
	}
	if t := strings.TrimSpace(os.Getenv(api.EnvVaultToken)); t != "" {
		return t, nil
	}
	return "", errors.New("vault.auth: no token: set VAULT_TOKEN or vault.auth.token_file, or use approle or kubernetes")
}

// watch keeps the proxy's token renewed; when renewal stops (revoked, max TTL), it logs in
// again.
func (v *vaultClient) watch(auth *api.Secret) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.watcher != nil {
		v.watcher.Stop()
		close(v.wstop)
		v.watcher = nil
	}
	select {
	case <-v.stop:
		return nil
	default:
	}
	if auth == nil || auth.Auth == nil || !auth.Auth.Renewable {
		return nil
	}
	w, err := v.c.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: auth})
	if err != nil {
		return fmt.Errorf("vault token watcher: %w", err)
	}
	v.watcher = w
	wstop := make(chan struct{})
	v.wstop = wstop
	gen := v.gen.Load()
	v.done.Add(2)
	go func() { defer v.done.Done(); w.Start() }()
	go func() {
		defer v.done.Done()
		for {
			select {
			case <-v.stop:
				w.Stop()
				return
			case <-wstop:
				return
			case <-w.RenewCh():
			case err := <-w.DoneCh():
				if err != nil {
					v.log.Warn("vault token renewal stopped; logging in again", "error", sanitize(err).Error())
				}
				select {
				case <-v.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
				if err := v.reauth(ctx, gen); err != nil {
					v.log.Error("vault re-authentication failed", "error", err.Error())
				}
				cancel()
				return
			}
		}
	}()
	return nil
}

// reauth logs in again unless someone already did since login generation seen.
func (v *vaultClient) reauth(ctx context.Context, seen uint64) error {
	_, err, _ := v.login.Do("login", func() (any, error) {
		if v.gen.Load() != seen {
			return nil, nil
		}
		if err := v.authenticate(ctx); err != nil {
			return nil, err
		}
		if v.onReauth != nil {
			v.onReauth()
		}
		return nil, nil
	})
	return err
}

// do runs f; when Vault answers 403 because the proxy's own token is no longer valid, it
// logs in again and runs f once more.
func (v *vaultClient) do(ctx context.Context, f func(ctx context.Context) error) error {
	gen := v.gen.Load()
	err := v.call(ctx, f)
	if !isStatus(err, http.StatusForbidden) {
		return err
	}
	if lerr := v.call(ctx, func(ctx context.Context) error {
		_, err := v.c.Auth().Token().LookupSelfWithContext(ctx)
		return err
	}); lerr == nil || !isStatus(lerr, http.StatusForbidden) {
		return err // the token is fine: the path itself is denied
	}
	v.log.Warn("vault token no longer valid; logging in again", "method", v.method())
	if rerr := v.reauth(ctx, gen); rerr != nil {
		return &unavailableError{fmt.Errorf("%w: %w", errReauth, rerr)}
	}
	return v.call(ctx, f)
}

func (v *vaultClient) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	return f(ctx)
}

// fetch performs src's call and returns the response as the API returned it (for templates)
// and parsed (for the lease).
func (v *vaultClient) fetch(ctx context.Context, src *VaultSource) (map[string]any, *api.Secret, error) {
	var raw []byte
	err := v.do(ctx, func(ctx context.Context) error {
		path := strings.Trim(src.Path, "/")
		var resp *api.Response
		var err error
		if src.method() == http.MethodGet {
			q := map[string][]string{}
			for k, p := range src.Params {
				q[k], _ = queryValues(p)
			}
			resp, err = v.c.Logical().ReadRawWithDataWithContext(ctx, path, q)
		} else {
			body, merr := json.Marshal(src.Params)
			if merr != nil {
				return fmt.Errorf("encode params: %w", merr)
			}
			resp, err = v.c.Logical().WriteRawWithContext(ctx, path, body)
		}
		if resp != nil {
			defer resp.Body.Close()
		}
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if _, err := b.ReadFrom(http.MaxBytesReader(nil, resp.Body, 1<<20)); err != nil {
			return fmt.Errorf("read vault response: %w", err)
		}
		raw = b.Bytes()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, &statusError{status: http.StatusNoContent, msg: "vault returned no data"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var data map[string]any
	if err := dec.Decode(&data); err != nil {
		return nil, nil, errors.New("vault response is not a JSON object")
	}
	sec, err := api.ParseSecret(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, errors.New("vault response is not a secret")
	}
	return data, sec, nil
}

func (v *vaultClient) renewLease(ctx context.Context, leaseID string, increment int) (*api.Secret, error) {
	var s *api.Secret
	err := v.do(ctx, func(ctx context.Context) (err error) {
		s, err = v.c.Sys().RenewWithContext(ctx, leaseID, increment)
		return err
	})
	return s, err
}

func (v *vaultClient) renewToken(ctx context.Context, token string, increment int) (*api.Secret, error) {
	var s *api.Secret
	err := v.do(ctx, func(ctx context.Context) (err error) {
		s, err = v.c.Auth().Token().RenewWithContext(ctx, token, increment)
		return err
	})
	return s, err
}

func (v *vaultClient) revokeLease(ctx context.Context, leaseID string) error {
	return v.do(ctx, func(ctx context.Context) error { return v.c.Sys().RevokeWithContext(ctx, leaseID) })
}

func (v *vaultClient) revokeToken(ctx context.Context, token string) error {
	return v.do(ctx, func(ctx context.Context) error { return v.c.Auth().Token().RevokeTreeWithContext(ctx, token) })
}

// revokeAccessor revokes the token with accessor (and its children).
func (v *vaultClient) revokeAccessor(ctx context.Context, accessor string) error {
	return v.do(ctx, func(ctx context.Context) error { return v.c.Auth().Token().RevokeAccessorWithContext(ctx, accessor) })
}

// close stops the watcher and, for a login-issued token, revokes it.
func (v *vaultClient) close(ctx context.Context) error {
	close(v.stop)
	v.mu.Lock()
	if v.watcher != nil {
		v.watcher.Stop()
		close(v.wstop)
		v.watcher = nil
	}
	v.mu.Unlock()
	v.done.Wait()
	if v.method() == AuthToken {
		return nil
	}
	return v.call(ctx, func(ctx context.Context) error {
		return v.c.Auth().Token().RevokeSelfWithContext(ctx, "")
	})
}
