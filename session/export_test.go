package session

import "time"

// SetStdinStall sets how long a full stdin backlog waits for its command, for a test;
// the returned func puts the default back.
func SetStdinStall(d time.Duration) (restore func()) {
	old := stdinStall
	stdinStall = d
	return func() { stdinStall = old }
}
