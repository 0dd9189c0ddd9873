#!/bin/sh
# One-shot setup of the dev-mode Vault for the example config: KV v2 secrets the
# credentials read, a least-privilege policy, an AppRole for airlock, and the files airlock
# reads (AppRole secret id, audit signing key, approver token) in /run/airlock-secrets.
set -eu
export VAULT_ADDR="${VAULT_ADDR:-http://vault:8200}"
out=/run/airlock-secrets

until vault status >/dev/null 2>&1; do sleep 1; done

# Dev mode mounts KV v2 at secret/; enable it explicitly when it is missing.
vault secrets list -format=json | grep -q '"secret/"' || vault secrets enable -path=secret kv-v2

# Demo values: replace with real tokens (vault kv put secret/github read_token=... write_token=...).
vault kv get secret/github >/dev/null 2>&1 || \
  vault kv put secret/github read_token="demo-read-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
                             write_token="demo-write-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
vault kv get secret/internal-api >/dev/null 2>&1 || \
  vault kv put secret/internal-api key="demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

vault policy write airlock - <<'POLICY'
path "secret/data/github"       { capabilities = ["read"] }
path "secret/data/internal-api" { capabilities = ["read"] }
path "sys/leases/revoke"        { capabilities = ["update"] }
path "auth/token/revoke-self"   { capabilities = ["update"] }
POLICY

vault auth list -format=json | grep -q '"approle/"' || vault auth enable approle
vault write auth/approle/role/airlock token_policies=airlock token_ttl=1h token_max_ttl=24h \
  secret_id_ttl=0 secret_id_num_uses=0
vault write auth/approle/role/airlock/role-id role_id=airlock-demo

mkdir -p "$out"
umask 077
vault write -f -field=secret_id auth/approle/role/airlock/secret-id > "$out/vault-secret-id"
# Ed25519 seed (hex) for signed audit checkpoints; `airlock audit verify --public-key` accepts this file too.
[ -s "$out/audit.key" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$out/audit.key"
[ -s "$out/approver.token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$out/approver.token"
chown -R 65532:65532 "$out"
chmod 0400 "$out"/*
echo "vault-init: done"
