package main

import (
	"os"
	"testing"
)

// TestTTYMode: -t forces a terminal, -T refuses one, both contradict; without either a
// terminal is given only when stdin and stdout are terminals (here: pipes, so none).
func TestTTYMode(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, tc := range []struct {
		name    string
		mode    ttyMode
		want    bool
		wantErr bool
	}{
		{"default, pipes", ttyMode{}, false, false},
		{"-t", ttyMode{force: true}, true, false},
		{"-T", ttyMode{refuse: true}, false, false},
		{"-t -T", ttyMode{force: true, refuse: true}, false, true},
	} {
		got, err := tc.mode.want(r, w)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: got %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestHostTTYWithoutATerminal: -t with neither stdin nor stdout a terminal gives the
// command the default size and leaves the (absent) host terminal alone; end is safe to
// call twice and on nil.
func TestHostTTYWithoutATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	h := &hostTTY{in: r, out: w}
	tt, err := h.start()
	if err != nil {
		t.Fatal(err)
	}
	if tt.Size != defaultSize || tt.Resize == nil {
		t.Errorf("TTY = %+v, want the default size and a resize channel", tt)
	}
	if h.restore != nil {
		t.Error("raw mode on a pipe")
	}
	h.end()
	h.end()
	var none *hostTTY
	if tt, err := none.start(); tt != nil || err != nil {
		t.Errorf("nil hostTTY: %v %v", tt, err)
	}
	none.end()
}
