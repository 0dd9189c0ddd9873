package rego

import (
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// malformedError explains why a policy's decision could not be used.
type malformedError struct{ msg string }

func (e *malformedError) Error() string { return e.msg }

func malformed(format string, args ...any) *malformedError {
	return &malformedError{msg: fmt.Sprintf(format, args...)}
}

// parseDecision reads a decision object from the policy's result term, without converting it
// to Go maps first. A decision that does not follow the contract yields a deny whose reason
// says what is wrong with it, and the error that explains it.
func parseDecision(v ast.Value) (Decision, error) {
	d, err := readDecision(v)
	if err != nil {
		return Decision{
			Action: ActionDeny,
			Rule:   d.Rule,
			Reason: "the airlock policy returned a malformed decision (" + err.Error() + "), so the request is denied; ask the operator to fix the policy",
		}, err
	}
	return d, nil
}

func readDecision(v ast.Value) (Decision, error) {
	var d Decision
	obj, ok := v.(ast.Object)
	if !ok {
		return d, malformed("decision is %s, want an object", ast.ValueName(v))
	}
	// The rule is read first so that a malformed decision still names the rule that made it.
	if t := obj.Get(ast.InternedTerm("rule")); t != nil {
		s, ok := t.Value.(ast.String)
		if !ok {
			return d, malformed("rule is %s, want a string", ast.ValueName(t.Value))
		}
		d.Rule = string(s)
	}
	var err error
	obj.Foreach(func(k, t *ast.Term) {
		if err != nil {
			return
		}
		key, _ := k.Value.(ast.String)
		switch key {
		case "action":
			err = readAction(&d, t.Value)
		case "reason":
			s, ok := t.Value.(ast.String)
			if !ok {
				err = malformed("reason is %s, want a string", ast.ValueName(t.Value))
			}
			d.Reason = string(s)
		case "credentials":
			d.Credentials, err = readStrings("credentials", t.Value)
		case "tunnel":
			b, ok := t.Value.(ast.Boolean)
			if !ok {
				err = malformed("tunnel is %s, want a boolean", ast.ValueName(t.Value))
			}
			d.Tunnel = bool(b)
		case "approval":
			d.Approval, err = readApproval(t.Value)
		case "reflects":
			switch b := t.Value.(type) {
			case ast.Boolean:
				v := bool(b)
				d.Reflects = &v
			case ast.Null:
			default:
				err = malformed("reflects is %s, want a boolean", ast.ValueName(t.Value))
			}
		case "credential_optional":
			b, ok := t.Value.(ast.Boolean)
			if !ok {
				err = malformed("credential_optional is %s, want a boolean", ast.ValueName(t.Value))
			}
			d.CredentialOptional = bool(b)
		case "upgrade":
			b, ok := t.Value.(ast.Boolean)
			if !ok {
				err = malformed("upgrade is %s, want a boolean", ast.ValueName(t.Value))
			}
			d.Upgrade = bool(b)
		}
	})
	if err != nil {
		return d, err
	}
	if d.Action == "" {
		return d, malformed(`decision has no "action"`)
	}
	if d.Tunnel && len(d.Credentials) > 0 {
		return d, malformed("tunnel: true cannot carry credentials (a tunnel is not intercepted)")
	}
	if d.Upgrade && len(d.Credentials) > 0 && d.MayReflect() {
		return d, malformed(`upgrade: true with credentials needs "reflects": false (an upgraded stream cannot be checked for echoed credentials without holding back what the sandbox waits for, so only a destination declared not to reflect may upgrade)`)
	}
	return d, nil
}

func readAction(d *Decision, v ast.Value) error {
	s, ok := v.(ast.String)
	if !ok {
		return malformed("action is %s, want a string", ast.ValueName(v))
	}
	switch a := Action(s); a {
	case ActionAllow, ActionDeny, ActionApprove:
		d.Action = a
		return nil
	default:
		return malformed("action is %q, want \"allow\", \"deny\" or \"approve\"", string(s))
	}
}

func readStrings(name string, v ast.Value) ([]string, error) {
	var out []string
	var err error
	add := func(t *ast.Term) {
		s, ok := t.Value.(ast.String)
		if !ok {
			if err == nil {
				err = malformed("%s holds %s, want strings", name, ast.ValueName(t.Value))
			}
			return
		}
		out = append(out, string(s))
	}
	switch x := v.(type) {
	case ast.Null:
		return nil, nil
	case *ast.Array:
		if x.Len() == 0 {
			return nil, nil
		}
		out = make([]string, 0, x.Len())
		x.Foreach(add)
	case ast.Set:
		if x.Len() == 0 {
			return nil, nil
		}
		out = make([]string, 0, x.Len())
		x.Foreach(add)
	default:
		return nil, malformed("%s is %s, want an array of strings", name, ast.ValueName(v))
	}
	return out, err
}

func readApproval(v ast.Value) (ApprovalParams, error) {
	var p ApprovalParams
	obj, ok := v.(ast.Object)
	if !ok {
		return p, malformed("approval is %s, want an object", ast.ValueName(v))
	}
	t := obj.Get(ast.InternedTerm("timeout"))
	if t == nil {
		return p, nil
	}
	switch x := t.Value.(type) {
	case ast.String:
		dur, err := time.ParseDuration(string(x))
		if err != nil || dur <= 0 {
			return p, malformed("approval.timeout is %q, want a positive duration such as \"10m\"", string(x))
		}
		p.Timeout = Duration(dur)
	case ast.Number:
		secs, ok := x.Float64()
		if !ok || secs <= 0 {
			return p, malformed("approval.timeout is %v, want a positive number of seconds", x)
		}
		p.Timeout = Duration(time.Duration(secs * float64(time.Second)))
	default:
		return p, malformed("approval.timeout is %s, want a duration string such as \"10m\"", ast.ValueName(t.Value))
	}
	return p, nil
}
