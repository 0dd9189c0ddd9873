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

// What Write and Error answer is what Do reads: the value, or the refusal's status and text.
func TestWriteAndErrorRoundTrip(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			Error(w, http.StatusConflict, "already decided")
			return
		}
		Write(w, http.StatusCreated, map[string]string{"id": "apr-1"})
	}))
	defer srv.Close()
	ctx := context.Background()
	var out struct{ ID string }
	if err := Do(ctx, nil, srv.URL, "", http.MethodGet, "/ok", nil, &out, 1<<10); err != nil || out.ID != "apr-1" {
		t.Errorf("Write: got %+v, %v; want id apr-1", out, err)
	}
	var se *StatusError
	if err := Do(ctx, nil, srv.URL, "", http.MethodGet, "/refuse", nil, &out, 1<<10); !errors.As(err, &se) || se.Status != http.StatusConflict || se.Message != "already decided" {
		t.Errorf("Error: got %v, want a 409 StatusError saying already decided", err)
	}
	resp, err := http.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, cc := resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
		t.Errorf("headers: Content-Type %q Cache-Control %q, want application/json and no-store", ct, cc)
	}
}
