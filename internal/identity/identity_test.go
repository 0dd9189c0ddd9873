package identity

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckID(t *testing.T) {
	for _, id := range []string{"a", "0", "sbx-7f3a", "sbx--a", "sbx-", strings.Repeat("a", MaxIDLen)} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{
		"", "-a", "SBX-A", "Sbx-a", "sbx-A", "sbx_a", "sbx.a", "sbx a", " sbx", "sbx\n", "sbx/a", "../x", "a:b",
		"\u0455bx", "sbx\u2010a", "ｓｂｘ", strings.Repeat("a", MaxIDLen+1), DefaultID,
	} {
		if err := CheckID(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("CheckID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}
