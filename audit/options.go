package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Fsync policies: when a written line is made durable (fsync). In every policy a line is
// written to the file (write(2)) before Record returns, so a crash of airlock alone loses no
// recorded line; the policy bounds what a crash of the machine (power, kernel) can lose.
const (
	// FsyncGroup (default): Record returns once the line is written; an fsync follows at most
	// GroupWindow later, shared by every line written meanwhile. A machine crash loses at most
	// the lines written in the last GroupWindow plus the fsync then running.
	FsyncGroup = "group"
	// FsyncAlways: Record returns only once the line is written and fsynced. Lines recorded
	// concurrently share one write and one fsync. A machine crash loses no recorded line.
	FsyncAlways = "always"
	// FsyncInterval is FsyncGroup with a longer bound, FsyncInterval (default 1s).
	FsyncInterval = "interval"
	// FsyncNever leaves writeback to the kernel (typically within 30s); rotation and Close
	// still fsync.
	FsyncNever = "never"
)

// Failure policies: what Record does when the file cannot be written.
const (
	OnFailureBlock = "block" // return the error, so the proxy refuses the request (default)
	// OnFailureBuffer keeps up to BufferEvents events in memory when the file cannot be
	// written, retries every second, and returns an error only once the buffer is full. The
	// proxy forwards requests whose decision record is only in that buffer: if airlock exits
	// or crashes before the file works again, those records are lost (Close reports them).
	OnFailureBuffer = "buffer"
)

// Options configures a Sink. The zero value of every field except Path means its default.
type Options struct {
	// Path of the live JSON Lines file. Rotated files are named Path.<UTC timestamp>.
	Path string
	// Fsync is "group" (default), "always", "interval" or "never" (see the constants).
	Fsync string
	// GroupWindow bounds the wait for an fsync under Fsync "group": default 2ms, at most 1s.
	GroupWindow time.Duration
	// FsyncInterval applies to Fsync "interval"; default 1s.
	FsyncInterval time.Duration
	// RotateBytes starts a new file before a line would take the live one past this size;
	// 0 never rotates.
	RotateBytes int64
	// SigningKeyFile holds an Ed25519 key (see LoadSigningKey). Without it no checkpoints
	// are written and the log is only hash-chained.
	SigningKeyFile string
	// CheckpointEvents writes a signed checkpoint after this many lines (default 1000);
	// CheckpointInterval after this much time with new lines (default 5s). Negative disables.
	// Lines after the last checkpoint are not yet signed: a crash leaves at most that many
	// unsigned lines, which a verifier holding the public key reports as such.
	CheckpointEvents   int
	CheckpointInterval time.Duration
	// OnFailure is "block" (default) or "buffer"; BufferEvents bounds the buffer (default 1000).
	OnFailure    string
	BufferEvents int
	// Logger receives the sink's own messages (never event contents); nil discards.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Fsync == "" {
		o.Fsync = FsyncGroup
	}
	if o.GroupWindow == 0 {
		o.GroupWindow = 2 * time.Millisecond
	}
	if o.FsyncInterval == 0 {
		o.FsyncInterval = time.Second
	}
	if o.CheckpointEvents == 0 {
		o.CheckpointEvents = 1000
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 5 * time.Second
	}
	if o.OnFailure == "" {
		o.OnFailure = OnFailureBlock
	}
	if o.BufferEvents == 0 {
		o.BufferEvents = 1000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Check reports every problem of o as Open would find it, defaults applied, without
// opening anything. Each names its config key (audit.fsync, ...), so that a config
// checker can report them with the rest; Path is not checked.
func (o Options) Check() error {
	o.setDefaults()
	var errs []error
	switch o.Fsync {
	case FsyncGroup, FsyncAlways, FsyncInterval, FsyncNever:
	default:
		errs = append(errs, fmt.Errorf("audit.fsync: %q is not an fsync policy; want group, always, interval or never", o.Fsync))
	}
	if o.GroupWindow < 0 || o.GroupWindow > time.Second {
		errs = append(errs, fmt.Errorf("audit.group_window: %s is out of range; want a short positive bound, at most 1s (use fsync: interval for longer)", o.GroupWindow))
	}
	if o.FsyncInterval < 0 {
		errs = append(errs, fmt.Errorf("audit.fsync_interval: %s is negative; want a positive duration", o.FsyncInterval))
	}
	if o.RotateBytes < 0 {
		errs = append(errs, fmt.Errorf("audit.rotate_bytes: %d is negative; want 0 (never rotate) or a size in bytes", o.RotateBytes))
	}
	switch o.OnFailure {
	case OnFailureBlock, OnFailureBuffer:
	default:
		errs = append(errs, fmt.Errorf("audit.on_failure: %q is not a failure policy; want block or buffer", o.OnFailure))
	}
	if o.BufferEvents < 0 {
		errs = append(errs, fmt.Errorf("audit.buffer_events: %d is negative; want a positive number of events", o.BufferEvents))
	}
	return errors.Join(errs...)
}

// Validate names the option at fault.
func (o *Options) Validate() error {
	if o.Path == "" {
		return fmt.Errorf("audit: path is required")
	}
	return o.Check()
}
