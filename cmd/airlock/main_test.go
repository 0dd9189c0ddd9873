package main

import (
	"os"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox/native"
)

// TestMain lets the tests' sandboxes re-execute this binary as their in-namespace stages.
func TestMain(m *testing.M) {
	native.Init()
	os.Exit(m.Run())
}
