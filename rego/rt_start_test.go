package rego

import (
	"context"
	"testing"
	"time"
)

// Red team: an engine Start made of options New refuses "decides nothing", but it keeps
// the options unchecked and without defaults: Watch on it (as `airlock proxy` runs it)
// polls with the negative interval and panics instead of returning.
func TestRTStartRefusedOptionsWatch(t *testing.T) {
	e := Start(context.Background(), Options{Bundle: "https://127.0.0.1:1/b.tar.gz", Poll: -time.Second})
	if err := e.Wait(context.Background()); err == nil {
		t.Fatal("Wait: no error for a negative poll interval")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("Watch on an engine whose options were refused panicked: %v", v)
		}
	}()
	e.Watch(ctx)
}
