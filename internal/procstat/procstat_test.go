package procstat

import (
	"os"
	"testing"
)

func TestStartTime(t *testing.T) {
	if got := StartTime(os.Getpid()); got == 0 {
		t.Error("StartTime of this process = 0, want its start time")
	}
	if got := StartTime(1 << 30); got != 0 {
		t.Errorf("StartTime of a pid that does not exist = %d, want 0", got)
	}
}
