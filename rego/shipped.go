package rego

import (
	"embed"
	"io/fs"
)

// shipped holds the policy that airlock uses when no --policy directory or bundle is given:
// the *.rego files of this directory (rules and their _test.rego tests) and data.json.
//
//go:embed *.rego data.json
var shipped embed.FS

// ShippedPolicy returns the embedded default policy (read-only), for `airlock policy test`
// without a directory and for documentation.
func ShippedPolicy() fs.FS { return shipped }
