package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfile writes a CPU profile of this run to $AIRLOCK_CPUPROFILE and an execution
// trace to $AIRLOCK_TRACE when they are set (for start-up work: `AIRLOCK_CPUPROFILE=cpu.out
// airlock sandbox run -- true`, then `go tool pprof`; where it waits: `go tool trace
// -pprof=sync trace.out`); the returned function ends them and is called before the process
// exits.
func startProfile() func() {
	stopTrace := startTrace()
	path := os.Getenv("AIRLOCK_CPUPROFILE")
	if path == "" {
		return stopTrace
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock: AIRLOCK_CPUPROFILE:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "airlock: AIRLOCK_CPUPROFILE:", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		stopTrace()
	}
}

func startTrace() func() {
	path := os.Getenv("AIRLOCK_TRACE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock: AIRLOCK_TRACE:", err)
		return func() {}
	}
	if err := trace.Start(f); err != nil {
		fmt.Fprintln(os.Stderr, "airlock: AIRLOCK_TRACE:", err)
		f.Close()
		return func() {}
	}
	return func() {
		trace.Stop()
		f.Close()
	}
}
