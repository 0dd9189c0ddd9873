// Package rego is airlock's policy engine and its shipped policy.
//
// An Engine evaluates data.airlock.decision (docs/architecture.md, "The policy contract") with OPA's
// evaluator: the policy is compiled once, each evaluation gets the input as an AST value built
// directly from Input (no JSON round trip), and a reload compiles and tests the new policy
// before it swaps it in atomically, so that a policy that does not compile or whose own
// _test.rego tests fail never replaces a good one. Any error, a timeout, an undefined or a
// malformed decision denies.
//
// The shipped policy is the *.rego and data.json files of this directory, embedded in the
// binary (see ShippedPolicy and README.md): a default-deny base and examples for package
// registries, GitHub and an internal API. `opa test rego/`, `opa fmt` and `opa check --strict`
// work on the directory unchanged; `go test ./rego/` runs the same checks.
package rego
