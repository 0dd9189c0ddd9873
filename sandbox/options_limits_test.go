package sandbox

import (
	"strings"
	"testing"
)

// TestNofileFor: the sandbox's descriptors (open-file limit × processes) stay within a
// quarter of the host's file table: the default is lowered to fit, a set limit that does not
// fit is refused.
func TestNofileFor(t *testing.T) {
	for _, tt := range []struct {
		nofile, pids, fileMax, want int64
		err                         string
	}{
		{0, 1024, 0, DefaultNofile, ""},                    // file-max unknown
		{0, 1024, 1 << 40, DefaultNofile, ""},              // a huge table
		{0, 1024, 2466112, 602, ""},                        // this project's machines
		{0, 100000, 2466112, 0, "lower the process limit"}, // not even 64 each fits
		{4096, 64, 2466112, 4096, ""},
		{4096, 1024, 2466112, 0, "at most 602 files each"},
		{1 << 62, 1 << 20, 2466112, 0, "quarter"}, // no overflow
	} {
		got, err := nofileFor(tt.nofile, tt.pids, tt.fileMax)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("nofileFor(%d, %d, %d) = %d, %v; want an error saying %q", tt.nofile, tt.pids, tt.fileMax, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("nofileFor(%d, %d, %d) = %d, %v; want %d", tt.nofile, tt.pids, tt.fileMax, got, err, tt.want)
		}
	}
}

// TestDefaultMemoryFor: a quarter of the host's memory, between 256 MiB (or all of a
// smaller host) and 4 GiB; TCPMemoryLimit a quarter of the memory limit, within its bounds.
func TestDefaultMemoryFor(t *testing.T) {
	for _, tt := range []struct{ total, want int64 }{
		{0, 256 << 20},         // unknown
		{128 << 20, 128 << 20}, // a tiny host: all of it
		{512 << 20, 256 << 20},
		{2 << 30, 512 << 20},
		{24 << 30, 4 << 30}, // this project's machines
		{1 << 40, 4 << 30},
	} {
		if got := defaultMemoryFor(tt.total); got != tt.want {
			t.Errorf("defaultMemoryFor(%d) = %d, want %d", tt.total, got, tt.want)
		}
	}
	for _, tt := range []struct{ memory, want int64 }{
		{16 << 20, 16 << 20}, {64 << 20, 16 << 20}, {1 << 30, 256 << 20}, {4 << 30, 1 << 30}, {64 << 30, 1 << 30},
	} {
		if got := TCPMemoryLimit(tt.memory); got != tt.want {
			t.Errorf("TCPMemoryLimit(%d) = %d, want %d", tt.memory, got, tt.want)
		}
	}
}
