//go:build e2e

package bypass_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
)

// bodyFuzzSeeds are bodies that parsers have read differently: duplicate and escaped keys,
// keys in another case, bad UTF-8 and surrogates, a byte order mark, huge numbers, batches,
// and JSON-RPC and GraphQL in one object.
var bodyFuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","arguments":{"id":1}}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","method":"notifications/x"}]`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"NAME":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{"n\u0061me":"upd\u0061te_issue"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\ud800"}}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\xff\"}}",
	"\ufeff{\"jsonrpc\":\"2.0\",\"method\":\"x\"}",
	`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"result":{}}`,
	`{"query":"query Q { a } mutation M { b }","operationName":"M"}`,
	`{"query":"mutation { x }","\u017fuery":"query { y }"}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","query":"mutation { x }"}`,
	`[{"query":"query { a }"},{"query":"mutation { b }"}]`,
	``,
}

// FuzzBodyDifferential sends each body through the real proxy to a body-aware path whose
// policy allows any JSON, and compares what the policy saw with what the upstream parses from
// the bytes it received: the official MCP SDK's JSON-RPC decoder for the method (a request,
// or a response when it has none), encoding/json for a tools/call's name and for a GraphQL
// query and operation name. A body the proxy refuses gets a 4xx that names the rule and
// says why, and nothing reaches the upstream. A seed run is part of the bypass suite; to
// search further:
//
//	go test -tags e2e -run '^$' -fuzz FuzzBodyDifferential -fuzztime 60s ./e2e/bypass/
func FuzzBodyDifferential(f *testing.F) {
	for _, s := range bodyFuzzSeeds {
		f.Add([]byte(s))
	}
	rec := &recordingDecider{}
	e := newEnv(f, func(o *proxy.Options) {
		o.BodyAware = o.Decider.(*rego.Engine)
		rec.Decider = o.Decider
		o.Decider = rec
	})
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: e.addr})}}
	u := e.upstreamURL() + "/fuzz"
	f.Fuzz(func(t *testing.T, body []byte) {
		_, nIn := rec.last()
		nSeen := e.seenLen()
		req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := e.seenSince(nSeen)
		if resp.StatusCode != http.StatusOK {
			if resp.StatusCode < 400 || resp.StatusCode > 499 || resp.Header.Get("X-Airlock-Rule") == "" || len(answer) == 0 {
				t.Fatalf("%q: refused with %d rule %q %q, want a 4xx that names its rule and says why", body, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), answer)
			}
			if len(got) != 0 {
				t.Fatalf("%q was refused (%d) but reached the upstream", body, resp.StatusCode)
			}
			return
		}
		if len(got) != 1 || !bytes.Equal(got[0].Body, body) {
			t.Fatalf("%q: the upstream received %d requests, want one with exactly the bytes the policy judged", body, len(got))
		}
		rec.mu.Lock()
		seenByPolicy := append([]rego.Input(nil), rec.inputs[nIn:]...)
		rec.mu.Unlock()
		elems := []json.RawMessage{body}
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
			if json.Unmarshal(body, &elems) != nil {
				return // a batch encoding/json cannot read is not acted on
			}
		}
		if len(elems) != len(seenByPolicy) {
			t.Fatalf("%q: the policy decided %d calls, the upstream reads %d", body, len(seenByPolicy), len(elems))
		}
		for i, el := range elems {
			compareCall(t, body, i, el, seenByPolicy[i].Request)
		}
	})
}

// compareCall checks one call's view in the policy input against the upstream's parsers.
func compareCall(t *testing.T, body []byte, i int, el json.RawMessage, in rego.RequestInput) {
	t.Helper()
	call := "call " + strconv.Itoa(i) + " of " + strconv.Quote(string(body))
	if msg, err := jsonrpc.DecodeMessage(el); err == nil {
		if in.MCP == nil {
			t.Fatalf("%s: the MCP SDK reads a JSON-RPC message the policy did not see as one", call)
		}
		switch m := msg.(type) {
		case *jsonrpc.Request:
			if m.Method != in.MCP.Method {
				t.Fatalf("%s: the MCP SDK reads method %q, the policy saw %q", call, m.Method, in.MCP.Method)
			}
			var p mcp.CallToolParamsRaw
			if m.Method == "tools/call" && json.Unmarshal(m.Params, &p) == nil && p.Name != in.MCP.Tool {
				t.Fatalf("%s: the server reads tool %q, the policy saw %q", call, p.Name, in.MCP.Tool)
			}
		case *jsonrpc.Response:
			if in.MCP.Method != "" {
				t.Fatalf("%s: the MCP SDK reads a response, the policy saw method %q", call, in.MCP.Method)
			}
		}
	}
	var g struct {
		Query         string `json:"query"`
		OperationName string `json:"operationName"`
	}
	if json.Unmarshal(el, &g) != nil || g.Query == "" {
		return
	}
	if in.GraphQL == nil {
		t.Fatalf("%s: encoding/json reads GraphQL query %q, the policy saw no GraphQL request", call, g.Query)
	}
	q, _ := in.Body.Get("query").String()
	n, _ := in.Body.Get("operationName").String()
	if q != g.Query || n != g.OperationName {
		t.Fatalf("%s: encoding/json reads query %q (%q), the policy parsed %q (%q)", call, g.Query, g.OperationName, q, n)
	}
}
