package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCanary drives allowed, refused, failed and echoing requests with a canary credential
// and checks that no log line, error text, printed or JSON-encoded value, or scrubbed
// response contains it.
func TestCanary(t *testing.T) {
	const canary = "CANARY-7f3a9b2c41d8e6"
	t.Setenv("AIRLOCK_CANARY", canary)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	creds := map[string]CredentialConfig{
		"ok":       {Env: "AIRLOCK_CANARY", Inject: Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}, MaxTTL: Duration(time.Minute)},
		"query":    {Env: "AIRLOCK_CANARY", Inject: Inject{Query: "key", Value: "{{ .value }}"}},
		"basic":    {Env: "AIRLOCK_CANARY", Inject: Inject{Basic: &BasicInject{Username: "u", Password: "{{ .value }}"}}},
		"badtmpl":  {Env: "AIRLOCK_CANARY", Inject: Inject{Header: "X-Key", Value: "{{ .value.nope }}"}},
		"badindex": {Env: "AIRLOCK_CANARY", Inject: Inject{Header: "X-Key", Value: `{{ index .value 99 }}`}},
	}
	b, err := New(context.Background(), Options{Credentials: creds, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })

	var seen []string // everything the sandbox or an operator could see
	see := func(vs ...any) {
		for _, v := range vs {
			for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
				seen = append(seen, fmt.Sprintf(f, v))
			}
			j, _ := json.Marshal(v)
			seen = append(seen, string(j))
			log.Info("value", "v", v)
		}
	}
	for _, names := range [][]string{{"ok"}, {"query"}, {"basic"}, {"ok", "query", "basic"}, {"badtmpl"}, {"badindex"}, {"nope"}, {"ok", "nope"}} {
		out, _ := http.NewRequest(http.MethodGet, "https://echo.example/?q=1", nil)
		s, err := b.Attach(context.Background(), AttachRequest{SandboxID: "sbx", Names: names, Out: out})
		if err != nil {
			seen = append(seen, err.Error())
			see(err)
			continue
		}
		// An echoing upstream returns everything it got.
		var echo bytes.Buffer
		_ = out.Header.Write(&echo)
		echo.WriteString(out.URL.String())
		resp := &http.Response{StatusCode: 200, Header: out.Header.Clone(), Body: io.NopCloser(strings.NewReader(echo.String()))}
		resp.Header.Set("Location", out.URL.String())
		if !strings.Contains(echo.String(), canary) && !strings.Contains(echo.String(), "Basic ") {
			t.Fatalf("%v: the credential was not attached", names)
		}
		s.ScrubResponse(resp)
		body, _ := io.ReadAll(resp.Body)
		var hdr bytes.Buffer
		_ = resp.Header.Write(&hdr)
		seen = append(seen, string(body), hdr.String())
		see(s)
	}
	b.mu.Lock()
	for _, e := range b.cache {
		see(e, *e, e.r)
	}
	b.mu.Unlock()
	see(b, NewSecret(canary), creds["ok"], Options{Credentials: creds})
	_ = b.RevokeSandbox(context.Background(), "sbx")
	seen = append(seen, logs.String())
	for _, s := range seen {
		if strings.Contains(s, canary) || strings.Contains(s, fmt.Sprintf("%x", canary)) {
			t.Fatalf("canary leaked: %q", s)
		}
	}
	if !strings.Contains(logs.String(), `"credential":"badtmpl"`) {
		t.Errorf("logs: got %q, want a line naming the failing credential", logs.String())
	}
}
