package main

import "github.com/airlock-proxy/airlock/sandbox/native"

// reexec runs the sandbox's in-namespace stages when this process was re-executed as one;
// it never returns in that case.
func reexec() { native.Init() }
