package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthReadyAndProxiedRefusal(t *testing.T) {
	ready := false
	h := New(Options{Ready: map[string]Check{"policy": func(context.Context) error {
		if !ready {
			return errors.New("no policy loaded")
		}
		return nil
	}}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	status := func(path string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, _ := status("/healthz", nil); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, body := status("/readyz", nil); code != 503 || !strings.Contains(body, "no policy loaded") {
		t.Errorf("/readyz before ready = %d %q, want 503 naming the check", code, body)
	}
	ready = true
	if code, _ := status("/readyz", nil); code != 200 {
		t.Errorf("/readyz when ready = %d, want 200", code)
	}
	if code, _ := status("/healthz", map[string]string{"Proxy-Authorization": "Basic eDp5"}); code != 403 {
		t.Errorf("proxied request = %d, want 403", code)
	}
}
