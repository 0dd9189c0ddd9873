package audit

import (
	"net/http/httptest"
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
