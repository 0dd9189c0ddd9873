// Package jsonapi is both sides of airlock's JSON APIs (admin, approvals, sessions). The
// server side writes an answer (Write) and a refusal as {"error": "..."} (Error); the client
// side sends a JSON request with a bearer token and reads the answer, or the refusal as a
// status and a message (Do). The admin, approval and session servers and clients use it.
package jsonapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// StatusError is a non-2xx answer: its status and the API's reason.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Do sends in as JSON (no body when nil) to base+path with the bearer token (none when
// empty) and decodes a 2xx answer of at most limit bytes into out. A non-2xx answer is a
// *StatusError; other errors start with base and say what failed (unreachable, reading or
// decoding the answer). hc nil means http.DefaultClient. The token appears in no error.
func Do(ctx context.Context, hc *http.Client, base, token, method, path string, in, out any, limit int64) error {
	base = strings.TrimRight(base, "/")
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode request: %w", base, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s unreachable: %w", base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return fmt.Errorf("%s: read answer: %w", base, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &StatusError{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", base, err)
	}
	return nil
}

// Write answers v as indented JSON with status; the answer is never cached.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Error answers a refusal, {"error": msg}, with status; Do reads it back as a *StatusError.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, map[string]string{"error": msg})
}
