package rego_test

import (
	"context"
	"fmt"

	"github.com/airlock-proxy/airlock/rego"
)

// The shipped policy allows reads from GitHub with the "github-read" credential and holds
// writes for approval.
func Example() {
	e, err := rego.New(context.Background(), rego.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, method := range []string{"GET", "POST"} {
		d, err := e.Decide(context.Background(), &rego.Input{
			Version: rego.InputVersion,
			Phase:   rego.PhaseRequest,
			Sandbox: rego.SandboxInput{ID: "sbx-1"},
			Request: rego.RequestInput{
				Method: method, Scheme: "https", Host: "api.github.com", Port: 443,
				Path: "/repos/acme/app/issues",
			},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(method, d.Action, d.Rule, d.Credentials)
	}
	// Output:
	// GET allow github.read [github-read]
	// POST approve github.write [github-write]
}
