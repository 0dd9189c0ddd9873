package output

import (
	"bytes"
	"errors"
	"testing"
)

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestCaptureKeepsTheBoundAndStreamsAll(t *testing.T) {
	var streamed bytes.Buffer
	c := &Capture{W: &streamed, Limit: 5}
	c.Write([]byte("abc"))
	c.Write([]byte("defg"))
	if got := string(c.Bytes()); got != "abcde" || !c.Dropped() {
		t.Errorf("kept %q dropped=%v, want abcde dropped", got, c.Dropped())
	}
	if streamed.String() != "abcdefg" {
		t.Errorf("streamed %q, want everything", streamed.String())
	}
	c2 := &Capture{W: failing{}, Limit: 10}
	if n, err := c2.Write([]byte("xy")); n != 2 || err != nil {
		t.Errorf("Write with a failing stream = %d, %v; want 2, nil", n, err)
	}
	if string(c2.Bytes()) != "xy" || c2.Dropped() {
		t.Errorf("kept %q, want xy", c2.Bytes())
	}
}
