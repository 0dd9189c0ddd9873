package audit

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSanitized(t *testing.T) {
	ev := Event{Query: "key=sekrit", ErrorClass: "dial tcp 10.0.0.1: token=abc", Labels: map[string]string{"a": "b"}}
	got := ev.Sanitized()
	if got.Query != "key=[redacted]" || got.ErrorClass != "invalid" {
		t.Errorf("got query %q class %q, want key=[redacted] and invalid", got.Query, got.ErrorClass)
	}
	got.Labels["a"] = "changed"
	if ev.Labels["a"] != "b" {
		t.Error("Sanitized shares the labels map with its input")
	}
	if c := (Event{ErrorClass: "vault_unreachable"}).Sanitized().ErrorClass; c != "vault_unreachable" {
		t.Errorf("got class %q, want vault_unreachable kept", c)
	}
}

func TestNewRequestEvent(t *testing.T) {
	tests := []struct {
		method, target string
		want           Event
	}{
		{"GET", "http://API.Example.com./v1/x?token=abc", Event{Kind: "request", Method: "GET", Scheme: "http", Host: "api.example.com", Port: 80, Path: "/v1/x", Query: "token=[redacted]"}},
		{"POST", "https://user:pw@h.test:8443/a%2Fb", Event{Kind: "request", Method: "POST", Scheme: "https", Host: "h.test", Port: 8443, Path: "/a%2Fb"}},
		{"GET", "http://[::1]:9000/", Event{Kind: "request", Method: "GET", Scheme: "http", Host: "::1", Port: 9000, Path: "/"}},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		got := NewRequestEvent(r)
		got.Time = tt.want.Time
		if got.Kind != tt.want.Kind || got.Method != tt.want.Method || got.Scheme != tt.want.Scheme ||
			got.Host != tt.want.Host || got.Port != tt.want.Port || got.Path != tt.want.Path || got.Query != tt.want.Query {
			t.Errorf("NewRequestEvent(%s %s) = %+v, want %+v", tt.method, tt.target, got, tt.want)
		}
	}
	r := httptest.NewRequest("CONNECT", "http://x/", nil)
	r.URL.Host, r.Host, r.URL.Path = "", "Git.Example:443", ""
	if got := NewRequestEvent(r); got.Kind != "connect" || got.Host != "git.example" || got.Port != 443 {
		t.Errorf("CONNECT: got %+v", got)
	}
}

// Long label keys that are the same for their first MaxNameBytes (and in length) are cut
// to the same key: every label still reaches the record, each under its own key, the same
// way on every run (red team: one was lost, which one varied with map order).
func TestLongLabelKeysKeepEveryLabel(t *testing.T) {
	p := strings.Repeat("team-", 60)
	ev := Event{ID: "x", Kind: "sandbox.exec", Labels: map[string]string{p + "a": "1", p + "b": "2", p + "c": "3", "short": "4"}}
	var first string
	for range 20 {
		b, err := encodeRecord(&ev)
		if err != nil {
			t.Fatal(err)
		}
		var got Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Labels) != 4 || got.Labels["short"] != "4" {
			t.Fatalf("record keeps %d of 4 labels: %s", len(got.Labels), b)
		}
		values := map[string]bool{}
		for k, v := range got.Labels {
			if len(k) > MaxNameBytes+40 {
				t.Errorf("label key of %d bytes, want it bounded", len(k))
			}
			values[v] = true
		}
		if len(values) != 4 {
			t.Errorf("label values %v, want 1 to 4 each once", values)
		}
		if first == "" {
			first = string(b[bytes.Index(b, []byte(`"labels"`)):])
		} else if s := string(b[bytes.Index(b, []byte(`"labels"`)):]); s != first {
			t.Fatalf("labels differ between runs:\n%s\n%s", first, s)
		}
	}
}
