package secrets

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/hashicorp/vault/api"
)

// Error is what Attach returns when a credential cannot be attached. Its text names the
// credential and the reason, written for the agent that reads it; it never holds a secret
// value or Vault's address. HTTPStatus says how the proxy answers: 503 when Vault (or the
// source) is unavailable and nothing valid is cached, 502 when Vault refused or answered
// with something unusable, 500 for a credential that is not configured.
type Error struct {
	Credential string
	Status     int
	Reason     string
	cause      error
}

func (e *Error) Error() string { return fmt.Sprintf("credential %q: %s", e.Credential, e.Reason) }

// HTTPStatus is the status the proxy answers the sandbox with.
func (e *Error) HTTPStatus() int { return e.Status }

// Unwrap returns the internal cause (sanitised: Vault error texts only, no values).
func (e *Error) Unwrap() error { return e.cause }

// unavailableError marks a failure to reach Vault or read a source.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// errReauth marks a failed re-authentication of the proxy's own Vault token.
var errReauth = errors.New("vault re-authentication failed")

// statusError is an unusable Vault answer.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// isStatus reports whether err is a Vault response with that status.
func isStatus(err error, status int) bool {
	var re *api.ResponseError
	return errors.As(err, &re) && re.StatusCode == status
}

// sanitize turns a Vault error into one that carries only Vault's own short error texts
// (printable, bounded), not the request URL or a raw body.
func sanitize(err error) error {
	if err == nil {
		return nil
	}
	var re *api.ResponseError
	if !errors.As(err, &re) {
		return err
	}
	if re.RawError || len(re.Errors) == 0 {
		return &vaultError{status: re.StatusCode, text: http.StatusText(re.StatusCode)}
	}
	return &vaultError{status: re.StatusCode, text: cleanText(strings.Join(re.Errors, "; "))}
}

// vaultError is a sanitised Vault error response.
type vaultError struct {
	status int
	text   string
}

func (e *vaultError) Error() string { return fmt.Sprintf("vault answered %d: %s", e.status, e.text) }

func cleanText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// classify maps a fetch failure for credential name to an *Error.
func classify(name string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var ke *keyError
	if errors.As(err, &ke) {
		return &Error{Credential: name, Status: http.StatusBadGateway, Reason: ke.Error() + "; refused", cause: err}
	}
	var se *statusError
	if errors.As(err, &se) {
		return &Error{Credential: name, Status: http.StatusBadGateway, Reason: se.msg, cause: err}
	}
	var re *api.ResponseError
	if errors.As(err, &re) {
		clean := sanitize(re)
		switch {
		case re.StatusCode == http.StatusForbidden:
			return &Error{Credential: name, Status: http.StatusBadGateway, Reason: "vault denied the request: " + clean.(*vaultError).text, cause: clean}
		case re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests:
			return &Error{Credential: name, Status: http.StatusServiceUnavailable, Reason: "vault is unavailable (" + clean.Error() + ") and no valid credential is cached", cause: clean}
		default:
			return &Error{Credential: name, Status: http.StatusBadGateway, Reason: "vault rejected the request: " + clean.Error(), cause: clean}
		}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Credential: name, Status: http.StatusServiceUnavailable, Reason: "request cancelled while fetching the credential", cause: err}
	}
	var ue *unavailableError
	if errors.As(err, &ue) {
		reason := ue.Error()
		if errors.Is(err, errReauth) {
			reason = "airlock cannot authenticate to vault and no valid credential is cached"
		}
		return &Error{Credential: name, Status: http.StatusServiceUnavailable, Reason: reason, cause: err}
	}
	// Transport errors, timeouts, failed re-authentication: Vault cannot be reached.
	return &Error{Credential: name, Status: http.StatusServiceUnavailable, Reason: "vault is unreachable and no valid credential is cached", cause: err}
}
