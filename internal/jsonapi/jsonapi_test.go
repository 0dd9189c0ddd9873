package jsonapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDo(t *testing.T) {
	const token = "canary-token-7f3a"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"bearer token required"}`))
			return
		}
		switch r.URL.Path {
		case "/echo":
			w.Write([]byte(`{"got":"` + r.Header.Get("Content-Type") + `"}`))
		case "/plain":
			http.Error(w, "upstream broke", http.StatusBadGateway)
		default:
			w.Write([]byte(`not json`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	var out struct{ Got string }
	if err := Do(ctx, nil, srv.URL+"/", token, http.MethodPost, "/echo", map[string]int{"a": 1}, &out, 1<<10); err != nil || out.Got != "application/json" {
		t.Errorf("2xx: %v %+v, want the answer decoded", err, out)
	}
	var se *StatusError
	err := Do(ctx, nil, srv.URL, "wrong", http.MethodGet, "/echo", nil, &out, 1<<10)
	if !errors.As(err, &se) || se.Status != 401 || se.Message != "bearer token required" {
		t.Errorf("401: %v, want a StatusError with the API's reason", err)
	}
	err = Do(ctx, nil, srv.URL, token, http.MethodGet, "/plain", nil, &out, 1<<10)
	if !errors.As(err, &se) || se.Status != 502 || se.Message != "upstream broke" {
		t.Errorf("non-JSON refusal: %v, want its text as the message", err)
	}
	if err := Do(ctx, nil, srv.URL, token, http.MethodGet, "/other", nil, &out, 1<<10); err == nil || !strings.Contains(err.Error(), "decode answer") {
		t.Errorf("undecodable answer: %v", err)
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	err = Do(ctx, nil, dead, token, http.MethodGet, "/echo", nil, &out, 1<<10)
	if err == nil || !strings.HasPrefix(err.Error(), dead+" unreachable") || errors.As(err, &se) {
		t.Errorf("unreachable: %v, want an error naming the address", err)
	}
	if err != nil && strings.Contains(err.Error(), token) {
		t.Error("the error holds the token")
	}
}
