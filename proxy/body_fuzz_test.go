package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"testing"
)

// pyJSON is a Python process reading bodies with json.loads (testdata/jsonread.py).
type pyJSON struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

type pyCall struct {
	Method        string   `json:"method"`
	Tool          string   `json:"tool"`
	ArgumentKeys  []string `json:"argument_keys"`
	Query         string   `json:"query"`
	OperationName string   `json:"operation_name"`
}

type pyBody struct {
	Calls []pyCall `json:"calls"`
	Error string   `json:"error"`
}

func startPyJSON(f *testing.F) *pyJSON {
	f.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		f.Skip("python3 not found: the body differential fuzz target compares with Python's json module (scripts/test.sh installs python3)")
	}
	cmd := exec.Command(py, "testdata/jsonread.py")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	return &pyJSON{in: in, out: bufio.NewReader(out)}
}

func (p *pyJSON) read(t *testing.T, body []byte) pyBody {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := json.Marshal(base64.StdEncoding.EncodeToString(body))
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("write to python: %v", err)
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read from python: %v", err)
	}
	var r pyBody
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("python answered %q: %v", line, err)
	}
	return r
}

// goMessage is how a Go server typically decodes a JSON-RPC or GraphQL body: encoding/json
// into a struct (case-insensitive field names, last duplicate wins, bad UTF-8 replaced).
type goMessage struct {
	Method string `json:"method"`
	Params struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"params"`
	Query         string `json:"query"`
	OperationName string `json:"operationName"`
}

var bodySeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","arguments":{"id":1}}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","method":"notifications/x"}]`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"NAME":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{"n\u0061me":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\ud800"}}`,
	"\ufeff{\"jsonrpc\":\"2.0\",\"method\":\"x\"}",
	`{"query":"query Q { a } mutation M { b }","operationName":"M"}`,
	`{"query":"mutation { x }","\u017fuery":"query { y }"}`,
	`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`,
}

// FuzzBodyDifferential: for any body the proxy accepts at a body-aware destination, what
// the policy saw (JSON-RPC method, tool, argument names; GraphQL query and operation name)
// is what Python's json module and Go's encoding/json read from the forwarded bytes; and the
// forwarded bytes are the bytes sent.
func FuzzBodyDifferential(f *testing.F) {
	py := startPyJSON(f)
	for _, s := range bodySeeds {
		f.Add([]byte(s))
	}
	p := &Proxy{opts: Options{Limits: Limits{MaxPolicyBodyBytes: 1 << 16}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _ := http.NewRequest(http.MethodPost, "http://mcp.test/mcp", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		calls, refused := p.readPolicyBody(r, target{scheme: "http", host: "mcp.test", port: 80, path: "/mcp"})
		if refused != nil {
			if refused.status < 400 || refused.status > 499 || refused.reason == "" {
				t.Fatalf("refusal without a 4xx or a reason: %+v", refused)
			}
			return
		}
		sent, _ := io.ReadAll(r.Body)
		if !bytes.Equal(sent, body) {
			t.Fatalf("forwarded %q, the policy judged %q", sent, body)
		}
		if len(body) == 0 {
			return
		}
		got := py.read(t, sent)
		if got.Error != "" {
			t.Fatalf("the policy judged %q, which Python cannot read: %s", sent, got.Error)
		}
		if len(got.Calls) != len(calls) {
			t.Fatalf("%q: the policy saw %d calls, Python %d", sent, len(calls), len(got.Calls))
		}
		var goMsgs []goMessage
		if sent[0] == '[' || bytes.TrimLeft(sent, " \t\r\n")[0] == '[' {
			if err := json.Unmarshal(sent, &goMsgs); err != nil {
				goMsgs = nil // elements that are not objects: encoding/json refuses the batch
			}
		} else {
			var m goMessage
			if json.Unmarshal(sent, &m) == nil {
				goMsgs = []goMessage{m}
			}
		}
		for i, c := range calls {
			pc := got.Calls[i]
			var want pyCall
			if c.mcp != nil {
				want.Method, want.Tool = c.mcp.Method, c.mcp.Tool
				if c.mcp.Arguments != nil {
					want.ArgumentKeys = slices.Sorted(slices.Values(c.mcp.Arguments.Keys))
				}
			}
			if c.mcp != nil && c.mcp.Method != "tools/call" {
				// Only a tools/call has a tool and arguments in the view.
				pc.Tool, pc.ArgumentKeys = "", nil
			}
			if c.mcp != nil && (pc.Method != want.Method || pc.Tool != want.Tool || !slices.Equal(pc.ArgumentKeys, want.ArgumentKeys)) {
				t.Fatalf("%q call %d: the policy saw %+v, Python reads %+v", sent, i, want, pc)
			}
			if c.graphql != nil {
				q, _ := c.body.Get("query").String()
				n, _ := c.body.Get("operationName").String()
				if pc.Query != q || pc.OperationName != n {
					t.Fatalf("%q call %d: the policy parsed query %q (%q), Python reads %q (%q)", sent, i, q, n, pc.Query, pc.OperationName)
				}
			}
			if goMsgs == nil || i >= len(goMsgs) {
				continue
			}
			g := goMsgs[i]
			if c.mcp != nil && (g.Method != c.mcp.Method || c.mcp.Method == "tools/call" && g.Params.Name != c.mcp.Tool) {
				t.Fatalf("%q call %d: the policy saw %q %q, encoding/json reads %q %q", sent, i, c.mcp.Method, c.mcp.Tool, g.Method, g.Params.Name)
			}
			if c.graphql != nil {
				q, _ := c.body.Get("query").String()
				if g.Query != q {
					t.Fatalf("%q call %d: the policy parsed query %q, encoding/json reads %q", sent, i, q, g.Query)
				}
			}
		}
	})
}
