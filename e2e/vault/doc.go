// Package vault holds end-to-end tests of the secrets broker against a real in-process Vault.
package vault
