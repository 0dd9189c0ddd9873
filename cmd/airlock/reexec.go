package main

// reexec runs the sandbox's in-namespace init when this process was started as one; it
// never returns in that case. Replaced when the sandbox backend is wired.
func reexec() {}
