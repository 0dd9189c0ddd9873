package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Egress and credential-brokering proxy for AI-agent sandboxes",
		Long: `airlock is the only way out of an agent's sandbox. Every HTTP and HTTPS request is
checked against an OPA Rego policy, given short-lived credentials on the way out (the
sandbox never sees them), held for approval when the policy says so, and recorded.`,
		Example: `  # run a command in a sandbox whose only way out is the proxy, under the shipped policy
  airlock sandbox run -- curl -sS https://proxy.golang.org/golang.org/x/net/@v/list

  # run the proxy on 127.0.0.1:3128 with a policy directory
  airlock proxy --policy ./policy --listen 127.0.0.1:3128`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(newProxyCmd(), newPolicyCmd(), newCACmd(), newAuditCmd(), newApprovalsCmd(), newMCPCmd())
	addSandboxCmd(root)
	useFlagUsages(root)
	return root
}

// useFlagUsages makes help list a bool flag as --name, as it is used, not as pflag writes
// it (--name[=true|false]); the columns stay aligned.
func useFlagUsages(root *cobra.Command) {
	cobra.AddTemplateFunc("flagUsages", func(fs *pflag.FlagSet) string {
		return strings.ReplaceAll(fs.FlagUsages(), "[=true|false]", strings.Repeat(" ", len("[=true|false]")))
	})
	t := root.UsageTemplate()
	t = strings.ReplaceAll(t, "{{.LocalFlags.FlagUsages", "{{flagUsages .LocalFlags")
	t = strings.ReplaceAll(t, "{{.InheritedFlags.FlagUsages", "{{flagUsages .InheritedFlags")
	root.SetUsageTemplate(t)
}
