package rego

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden from the shipped policy's current decisions")

// goldenCase is one input and the decision the shipped policy gives it.
type goldenCase struct {
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Decision *Decision       `json:"decision"`
}

// TestGoldenDecisions pins the shipped policy's decisions, reasons included, for a table of
// inputs in testdata/golden/*.json. After an intended change: go test ./rego/ -run Golden -update
func TestGoldenDecisions(t *testing.T) {
	e, err := New(context.Background(), Options{Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cases []goldenCase
		if err := json.Unmarshal(raw, &cases); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i := range cases {
			c := &cases[i]
			in, err := ParseInputJSON(c.Input)
			if err != nil {
				t.Fatalf("%s: %s: %v", file, c.Name, err)
			}
			got, err := e.Decide(context.Background(), in)
			if err != nil {
				t.Fatalf("%s: %s: Decide: %v", file, c.Name, err)
			}
			if *updateGolden {
				c.Decision = &got
				continue
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(c.Decision)
			if c.Decision == nil || !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("%s: %s:\n got %s\nwant %s", file, c.Name, gotJSON, wantJSON)
			}
		}
		if *updateGolden {
			out, err := json.MarshalIndent(cases, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
