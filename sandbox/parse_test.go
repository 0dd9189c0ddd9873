package sandbox

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"1048576", 1 << 20, false},
		{"64k", 64 << 10, false},
		{"512M", 512 << 20, false},
		{"2G", 2 << 30, false},
		{"1.5G", 3 << 29, false},
		{"256MiB", 256 << 20, false},
		{"", 0, true},
		{"M", 0, true},
		{"-1M", 0, true},
		{"12X", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseWorkspace(t *testing.T) {
	tests := []struct {
		in       string
		wantDir  string
		wantMode WorkspaceMode
		wantErr  bool
	}{
		{"/src", "/src", WorkspaceRW, false},
		{"/src:ro", "/src", WorkspaceRO, false},
		{"/src:cow", "/src", WorkspaceCoW, false},
		{"./a:b", "./a:b", WorkspaceRW, false},
		{":ro", "", "", true},
	}
	for _, tt := range tests {
		dir, mode, err := ParseWorkspace(tt.in)
		if (err != nil) != tt.wantErr || dir != tt.wantDir || mode != tt.wantMode {
			t.Errorf("ParseWorkspace(%q) = %q, %q, %v; want %q, %q, error %v", tt.in, dir, mode, err, tt.wantDir, tt.wantMode, tt.wantErr)
		}
	}
}

func TestMergeEnvReplacesByName(t *testing.T) {
	got := MergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"})
	if want := []string{"A=1", "B=3", "C=4"}; !slices.Equal(got, want) {
		t.Errorf("MergeEnv = %v, want %v", got, want)
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{"bad id", Options{ID: "../x"}},
		// One rule for ids (identity.CheckID): one spelling, no upper case.
		{"upper-case id", Options{ID: "SBX-A"}},
		{"mixed-case id", Options{ID: "Sbx-a"}},
		{"id with '_'", Options{ID: "sbx_a"}},
		{"id with '.'", Options{ID: "sbx.a"}},
		{"id of 64 bytes", Options{ID: strings.Repeat("a", 64)}},
		{"the default identity", Options{ID: "default"}},
		{"bad mode", Options{WorkspaceMode: "rwx"}},
		{"negative memory", Options{Memory: -1}},
		{"negative pids", Options{Pids: -1}},
		{"NaN cpus", Options{CPUs: math.NaN()}},
		{"infinite cpus", Options{CPUs: math.Inf(1)}},
		{"negative timeout", Options{Timeout: -time.Second}},
		{"relative read-only path", Options{ReadOnlyPaths: []string{"usr"}}},
		{"bad env", Options{Env: []string{"NOVALUE"}}},
	}
	for _, tt := range tests {
		if _, err := tt.o.withDefaults(); err == nil {
			t.Errorf("%s: withDefaults accepted %+v", tt.name, tt.o)
		}
	}
	o, err := Options{}.withDefaults()
	if err != nil || len(o.ID) != len("sbx-")+12 || o.Pids != DefaultPids || o.WorkspaceMode != WorkspaceRW {
		t.Errorf("defaults = %+v, %v", o, err)
	}
}

func TestObserveCountsDecisions(t *testing.T) {
	s := &Sandbox{}
	for _, d := range [][2]string{{"allow", "a.example"}, {"deny", "b.example"}, {"deny", "b.example"}, {"approved", "c.example"}, {"expired", "d.example"}} {
		s.Observe(event.Decision(d[0]), d[1])
	}
	r := s.Report().Requests
	if r.Allowed != 1 || r.Denied != 3 || r.Approved != 1 || !slices.Equal(r.DeniedDestinations, []string{"b.example", "d.example"}) {
		t.Errorf("counts = %+v", r)
	}
}
