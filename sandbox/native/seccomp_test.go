package native

import (
	"bytes"
	"errors"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

func TestSeccompProgramCompiles(t *testing.T) {
	plain, err1 := seccompProgram(sandbox.Options{})
	aio, err2 := seccompProgram(sandbox.Options{AllowAIO: true})
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("compile: %v", err)
	}
	if len(plain) == 0 || len(plain)%8 != 0 || bytes.Equal(plain, aio) {
		t.Errorf("programs of %d and %d bytes, want two different sock_filter arrays", len(plain), len(aio))
	}
}
