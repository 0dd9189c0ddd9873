package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/termsafe"
	"github.com/airlock-proxy/airlock/rego"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test and evaluate Rego policies",
		Example: `  airlock policy test ./policy
  echo '{"version":1,"phase":"request","sandbox":{"id":"s"},"request":{"method":"GET","scheme":"https","host":"pypi.org","port":443,"path":"/simple/requests/"}}' | airlock policy eval --input -`,
	}
	cmd.AddCommand(newPolicyTestCmd(), newPolicyEvalCmd())
	return cmd
}

// newPolicyTestCmd is `airlock policy test`.
func newPolicyTestCmd() *cobra.Command {
	var verbose bool
	test := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the policy's Rego tests (*_test.rego) with OPA's tester",
		Long:  "Run the policy's Rego tests with OPA's tester, as `opa test DIR` does. Without DIR, the shipped policy's own tests run.",
		Example: `  airlock policy test            # the shipped policy
  airlock policy test ./policy -v`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			_, failed, err := rego.RunTests(cmd.Context(), dir, cmd.OutOrStdout(), verbose)
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d policy test(s) failed", failed)
			}
			return nil
		},
	}
	test.Flags().BoolVarP(&verbose, "verbose", "v", false, "list every test")
	return test
}

// newPolicyEvalCmd is `airlock policy eval`.
func newPolicyEvalCmd() *cobra.Command {
	var policy, input string
	var explain bool
	eval := &cobra.Command{
		Use:   "eval --input F|-",
		Short: "Print the decision for one input document",
		Long:  "Evaluate data.airlock.decision for an input (the versioned schema of docs/architecture.md) and print the decision JSON. --explain adds OPA's trace.",
		Example: `  airlock policy eval --policy ./policy --input req.json
  airlock policy eval --input - --explain < req.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPolicyEval(cmd, policy, input, explain) },
	}
	eval.Flags().StringVar(&policy, "policy", "", "policy directory, bundle file or URL (default: the shipped policy)")
	eval.Flags().StringVar(&input, "input", "", "input JSON file, or - for standard input")
	eval.Flags().BoolVar(&explain, "explain", false, "print OPA's trace of the evaluation to stderr")
	return eval
}

// runPolicyEval prints the decision of the policy for the input file (- for stdin), and
// OPA's trace on stderr when explain is set.
func runPolicyEval(cmd *cobra.Command, policy, input string, explain bool) error {
	if input == "" {
		return errors.New("--input is required (a file, or - for standard input)")
	}
	var b []byte
	var err error
	if input == "-" {
		b, err = io.ReadAll(cmd.InOrStdin())
	} else {
		b, err = os.ReadFile(input)
	}
	if err != nil {
		return fmt.Errorf("read input: %w", err)
	}
	in, err := rego.ParseInputJSON(b)
	if err != nil {
		return err
	}
	eng, err := rego.New(cmd.Context(), policyOptions(&Config{Policy: policy}, nil))
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	d, trace, err := eng.Eval(cmd.Context(), in, explain)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return err
	}
	if explain {
		fmt.Fprintln(cmd.ErrOrStderr(), trace)
	}
	return nil
}

func homeDir() string {
	c := &Config{}
	c.defaults()
	return c.Home
}

func newCACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Manage airlock's interception CA ($AIRLOCK_HOME/ca)",
		Example: `  airlock ca init
  airlock ca cert > airlock-ca.pem`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "init",
		Short:   "Create the CA (ECDSA P-256, key mode 0600) if it is missing",
		Example: "  AIRLOCK_HOME=/var/lib/airlock airlock ca init",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := filepath.Join(homeDir(), "ca")
			_, created, err := ca.Init(dir)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(cmd.OutOrStdout(), "created CA in %s\n", dir)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "CA already exists in %s\n", dir)
			}
			return nil
		},
	}, &cobra.Command{
		Use:     "cert",
		Short:   "Print the CA certificate (PEM) for clients to trust",
		Example: "  airlock ca cert > /usr/local/share/ca-certificates/airlock.crt",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := ca.Load(filepath.Join(homeDir(), "ca"))
			if err != nil {
				return fmt.Errorf("%w (run `airlock ca init` first)", err)
			}
			_, err = cmd.OutOrStdout().Write(c.CertPEM())
			return err
		},
	})
	return cmd
}

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Work with audit logs", Example: "  airlock audit verify $AIRLOCK_HOME/audit.jsonl*"}
	var pubKey string
	var sealed bool
	verify := &cobra.Command{
		Use:   "verify F...",
		Short: "Check an audit log's hash chain and signed checkpoints",
		Long: "Check the hash chain across the given files (rotated files included, in any order) and, with --public-key, every checkpoint signature, " +
			"and that every event is covered by a valid signed checkpoint up to the end: events after the last one are reported with their lines and fail the check. " +
			"Without --public-key only the chain is checked, and the report says the log is unsigned. Exits non-zero and names the first break.",
		Example: `  airlock audit verify /var/lib/airlock/audit.jsonl
  airlock audit verify --public-key audit.pub audit.jsonl.* audit.jsonl`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := audit.VerifyOptions{Paths: args, RequireSealed: sealed}
			if pubKey != "" {
				k, err := audit.LoadPublicKey(pubKey)
				if err != nil {
					return err
				}
				opts.PublicKey = k
			}
			return audit.VerifyAndReport(cmd.OutOrStdout(), opts)
		},
	}
	verify.Flags().StringVar(&pubKey, "public-key", "", "Ed25519 public key file to check checkpoint signatures")
	verify.Flags().BoolVar(&sealed, "require-sealed", false, "fail unless the log ends with the final checkpoint airlock writes when it closes the log (for a log airlock no longer writes)")
	keygen := &cobra.Command{
		Use:     "keygen PRIVATE PUBLIC",
		Short:   "Create an Ed25519 key pair for signed audit checkpoints",
		Long:    "Create an Ed25519 key pair: PRIVATE (mode 0600) goes in audit.signing_key_file, PUBLIC is what `airlock audit verify --public-key` checks against. Existing files are not overwritten.",
		Example: `  airlock audit keygen /etc/airlock/audit.key /etc/airlock/audit.pub`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := audit.GenerateSigningKey(args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (private, 0600) and %s (public)\n", args[0], args[1])
			return nil
		},
	}
	cmd.AddCommand(verify, keygen)
	return cmd
}

func newApprovalsCmd() *cobra.Command {
	var af approverFlags
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List and decide requests held for approval (talks to the admin API)",
		Example: `  airlock approvals list --token-file ~/.airlock-approver
  airlock approvals approve apr-46fe60a07e229987aa316732 --comment "ok, release notes only"`,
	}
	cmd.PersistentFlags().StringVar(&af.addr, "admin", "http://127.0.0.1:9090", "admin API base URL")
	cmd.PersistentFlags().StringVar(&af.tokenFile, "token-file", "", "file with your approver token (or $AIRLOCK_APPROVER_TOKEN)")
	cmd.AddCommand(newApprovalsListCmd(&af), newApprovalsShowCmd(&af),
		newApprovalsDecideCmd(&af, "approve"), newApprovalsDecideCmd(&af, "deny"), newApprovalsDecideCmd(&af, "cancel"))
	return cmd
}

// approverFlags are how the approvals commands reach the admin API.
type approverFlags struct{ addr, tokenFile string }

func (a *approverFlags) client() (*approval.Client, error) {
	tok := os.Getenv("AIRLOCK_APPROVER_TOKEN")
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, err
		}
		tok = string(trimSpace(b))
	}
	if tok == "" {
		return nil, errors.New("an approver token is required: --token-file or $AIRLOCK_APPROVER_TOKEN")
	}
	return &approval.Client{BaseURL: a.addr, Token: tok}, nil
}

// newApprovalsListCmd is `airlock approvals list`.
func newApprovalsListCmd(af *approverFlags) *cobra.Command {
	var state string
	list := &cobra.Command{
		Use: "list", Short: "List approvals (pending by default)", Args: cobra.NoArgs,
		Example: "  airlock approvals list --state all",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			s := state
			if s == "all" {
				s = ""
			}
			recs, err := c.List(cmd.Context(), approval.State(s))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tSANDBOX\tMETHOD\tURL\tRULE\tEXPIRES")
			for _, r := range recs {
				// The sandbox chose the method and URL: shown with control, format and
				// blank characters escaped, so a reversed or hidden part shows as what it is.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Text(r.ID), r.State, termsafe.Text(r.Sandbox),
					termsafe.Text(r.Method), termsafe.Text(r.URL), termsafe.Text(r.Rule), r.Expires.Format("15:04:05"))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&state, "state", "pending", "pending, approved, denied, cancelled, expired, disconnected or all")
	return list
}

// newApprovalsShowCmd is `airlock approvals show`.
func newApprovalsShowCmd(af *approverFlags) *cobra.Command {
	var rawBody bool
	show := &cobra.Command{
		Use: "show ID", Short: "Show one approval as JSON (headers, warnings, body preview), or its whole body", Args: cobra.ExactArgs(1),
		Example: "  airlock approvals show apr-46fe60a07e229987aa316732\n  airlock approvals show apr-46fe60a07e229987aa316732 --body > body.bin",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			if rawBody {
				b, err := c.Body(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			r, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), r)
		},
	}
	show.Flags().BoolVar(&rawBody, "body", false, "write the exact held body (all of it) to stdout instead")
	return show
}

// newApprovalsDecideCmd is `airlock approvals approve`, `deny` or `cancel` (verb).
func newApprovalsDecideCmd(af *approverFlags, verb string) *cobra.Command {
	var comment string
	c := &cobra.Command{
		Use: verb + " ID", Short: verb + " a held request", Args: cobra.ExactArgs(1),
		Example: "  airlock approvals list\n  airlock approvals " + verb + ` apr-46fe60a07e229987aa316732 --comment "reason"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := af.client()
			if err != nil {
				return err
			}
			var r approval.Record
			switch verb {
			case "approve":
				r, err = cl.Approve(cmd.Context(), args[0], comment)
			case "deny":
				r, err = cl.Deny(cmd.Context(), args[0], comment)
			default:
				r, err = cl.Cancel(cmd.Context(), args[0], comment)
			}
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), r)
		},
	}
	c.Flags().StringVar(&comment, "comment", "", "comment recorded with the decision (shown to the agent on deny and cancel)")
	return c
}

// printJSON writes v as indented JSON in which every character that does not show as itself
// (controls, bidirectional overrides, zero-width and blank characters) is a \u escape: the
// same JSON to a parser, and to a person reading a record a sandbox wrote, no reversed or
// hidden text.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termsafe.JSON(b), '\n'))
	return err
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
