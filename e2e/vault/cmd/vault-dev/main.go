// Command vault-dev is the compose stack's Vault (deploy/build-companions.sh): the Vault of
// this module, the one the real-Vault suite runs (its core, HTTP API, KV and AppRole, at the
// version go.mod pins), as an in-memory, unsealed dev server, and the one-time setup the
// stack's vault-init service runs against it. Vault's own main package cannot be built from
// the Go module proxy (it needs the sdk of its own source tree); this is its dev mode with
// the engines airlock uses, not an imitation: every request is served by Vault's code.
//
//	vault-dev server   VAULT_DEV_LISTEN_ADDRESS (default 127.0.0.1:8200), VAULT_DEV_ROOT_TOKEN_ID (default root)
//	vault-dev init     VAULT_ADDR, VAULT_TOKEN; writes the files airlock reads into /run/airlock-secrets (-out)
//
// Dev mode keeps everything in memory and is not for production.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	kv "github.com/hashicorp/vault-plugin-secrets-kv"
	"github.com/hashicorp/vault/builtin/credential/approle"
	"github.com/hashicorp/vault/helper/namespace"
	"github.com/hashicorp/vault/helper/testhelpers/corehelpers"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/internalshared/configutil"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/sdk/physical/inmem"
	"github.com/hashicorp/vault/vault"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: vault-dev server | vault-dev init [-out DIR]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "server":
		err = server(ctx, envOr("VAULT_DEV_LISTEN_ADDRESS", "127.0.0.1:8200"), envOr("VAULT_DEV_ROOT_TOKEN_ID", "root"))
	case "init":
		out := "/run/airlock-secrets"
		if len(os.Args) == 4 && os.Args[2] == "-out" {
			out = os.Args[3]
		}
		err = setup(ctx, out)
	default:
		err = fmt.Errorf("unknown command %q: want server or init", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vault-dev:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// server runs an in-memory Vault, initialised with one key share, unsealed, with a root
// token of the given id and KV v2 at secret/ (as `vault server -dev` does), until ctx ends.
func server(ctx context.Context, addr, rootID string) error {
	logger := hclog.New(&hclog.LoggerOptions{Name: "vault", Level: hclog.Info, Output: os.Stderr})
	phys, err := inmem.NewInmem(nil, logger)
	if err != nil {
		return err
	}
	core, err := vault.NewCore(&vault.CoreConfig{
		Physical:           phys,
		Logger:             logger,
		DisableMlock:       true,
		LogicalBackends:    map[string]logical.Factory{"kv": kv.Factory},
		CredentialBackends: map[string]logical.Factory{"approle": approle.Factory},
		// No external plugins: the engines above are all this Vault has.
		BuiltinRegistry: corehelpers.NewMockBuiltinRegistry(),
	})
	if err != nil {
		return fmt.Errorf("core: %w", err)
	}
	defer core.Shutdown()
	rctx := namespace.RootContext(ctx)
	init, err := core.Initialize(rctx, &vault.InitParams{
		BarrierConfig: &vault.SealConfig{SecretShares: 1, SecretThreshold: 1, Name: "shamir"},
	})
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if ok, err := core.Unseal(init.SecretShares[0]); err != nil || !ok {
		return fmt.Errorf("unseal: %v (unsealed %v)", err, ok)
	}
	token, err := core.DecodeSSCToken(init.RootToken)
	if err != nil {
		return err
	}
	do := func(path string, data map[string]any) (*logical.Response, error) {
		resp, err := core.HandleRequest(rctx, &logical.Request{Operation: logical.UpdateOperation, ClientToken: token, Path: path, Data: data})
		if err == nil && resp.IsError() {
			err = resp.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return resp, nil
	}
	if _, err := do("sys/mounts/secret", map[string]any{"type": "kv", "options": map[string]string{"version": "2"}}); err != nil {
		return err
	}
	resp, err := do("auth/token/create", map[string]any{"id": rootID, "policies": []string{"root"}, "no_parent": true, "no_default_policy": true})
	if err != nil {
		return err
	}
	if resp == nil || resp.Auth == nil {
		return errors.New("creating the dev root token returned no token")
	}
	if _, err := do("auth/token/revoke-self", nil); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{
		Handler:           vaulthttp.Handler.Handler(&vault.HandlerProperties{Core: core, ListenerConfig: &configutil.Listener{Address: host}}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("dev server listening (in memory, unsealed, not for production)", "address", ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
