package audit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-proxy/airlock/audit"
)

func Example() {
	dir, _ := os.MkdirTemp("", "audit-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "audit.jsonl")

	sink, err := audit.Open(audit.Options{Path: path})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = sink.Record(context.Background(), &audit.Event{Kind: "request", SandboxID: "sbx-1",
		Method: "GET", Host: "api.github.com", Query: "token=abc", Decision: "allow", Rule: "github.read"})
	_ = sink.Close()

	r, err := audit.Verify([]string{path}, nil)
	fmt.Println(r.Events, err)
	// Output: 1 <nil>
}
