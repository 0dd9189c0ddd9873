package sandbox

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeBackend is an in-memory Backend whose commands exit with exit.
type fakeBackend struct{ exit int }

func (b fakeBackend) Create(context.Context, Options) (Instance, error) { return fakeInstance(b), nil }

type fakeInstance struct{ exit int }

func (i fakeInstance) Run(context.Context, Command) (Result, error) {
	return Result{ExitCode: i.exit, Usage: Usage{PeakMemory: 7 << 20}}, nil
}
func (fakeInstance) Changes() ([]Change, error)  { return nil, nil }
func (fakeInstance) Patch() ([]byte, error)      { return nil, nil }
func (fakeInstance) Close(context.Context) error { return nil }

func TestNewNeedsABackend(t *testing.T) {
	_, err := New(context.Background(), Options{})
	if err == nil || !strings.Contains(err.Error(), "no backend") {
		t.Fatalf("New without a backend: %v, want an error saying there is no backend", err)
	}
}

// TestLifecycleEvents: a sandbox's life is one EventStart with its limits, an EventRun per
// command with its outcome, and one EventEnd with the request counts, each carrying the
// sandbox's id and labels.
func TestLifecycleEvents(t *testing.T) {
	var got []Event
	o := Options{ID: "sbx-events", Labels: map[string]string{"task": "t"}, Backend: fakeBackend{exit: 3},
		Memory: 64 << 20, Timeout: time.Minute,
		OnEvent: func(_ context.Context, ev Event) { got = append(got, ev) }}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), Command{Args: []string{"make", "test"}}); err != nil {
		t.Fatal(err)
	}
	s.Observe("deny", "example.com")
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	kinds := make([]EventKind, len(got))
	for i, ev := range got {
		kinds[i] = ev.Kind
		if ev.SandboxID != "sbx-events" || ev.Labels["task"] != "t" {
			t.Errorf("event %d (%s): sandbox %q labels %v, want sbx-events with task=t", i, ev.Kind, ev.SandboxID, ev.Labels)
		}
	}
	if want := []EventKind{EventStart, EventRun, EventEnd}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	if st := got[0]; st.Memory != 64<<20 || st.Timeout != time.Minute || st.Pids != DefaultPids || st.WorkspaceMode != WorkspaceRW {
		t.Errorf("start event %+v, want the sandbox's limits", st)
	}
	if run := got[1]; run.Command != "make" || run.ExitCode != 3 || run.PeakMemory != 7<<20 {
		t.Errorf("run event %+v, want make exiting 3 at 7 MiB", run)
	}
	if end := got[2]; end.ExitCode != 3 || end.Requests.Denied != 1 || end.Error != "" {
		t.Errorf("end event %+v, want exit 3, one denied request, no error", end)
	}
}

// A command asked to run under a context that already ended does not start: the backend's
// Run is not called (red team: a native command started, to be killed at once, after a
// one-shot run was stopped).
func TestRunAfterTheContextEndedStartsNothing(t *testing.T) {
	b := &countingBackend{}
	s, err := New(context.Background(), Options{ID: "sbx-ended", Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, Command{Args: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("Run with an ended context: %v, want the context's error", err)
	}
	if b.runs != 0 {
		t.Errorf("the backend started %d commands", b.runs)
	}
}

type countingBackend struct{ runs int }

func (b *countingBackend) Create(context.Context, Options) (Instance, error) {
	return countingInstance{b}, nil
}

type countingInstance struct{ b *countingBackend }

func (i countingInstance) Run(context.Context, Command) (Result, error) {
	i.b.runs++
	return Result{}, nil
}
func (countingInstance) Changes() ([]Change, error)  { return nil, nil }
func (countingInstance) Patch() ([]byte, error)      { return nil, nil }
func (countingInstance) Close(context.Context) error { return nil }
