package audit

import (
	"fmt"
	"log/slog"
	"time"
)

// Fsync policies.
const (
	FsyncAlways   = "always"   // fsync after every line (default): nothing acknowledged is lost
	FsyncInterval = "interval" // fsync every FsyncInterval: faster, may lose that much on a crash
	FsyncNever    = "never"    // leave it to the OS
)

// Failure policies: what Record does when the file cannot be written.
const (
	OnFailureBlock  = "block"  // return the error, so the proxy refuses the request (default)
	OnFailureBuffer = "buffer" // keep up to BufferEvents in memory, retry; error once full
)

// Options configures a Sink. The zero value of every field except Path means its default.
type Options struct {
	// Path of the live JSON Lines file. Rotated files are named Path.<UTC timestamp>.
	Path string
	// Fsync is "always" (default), "interval" or "never".
	Fsync string
	// FsyncInterval applies to Fsync "interval"; default 1s.
	FsyncInterval time.Duration
	// RotateBytes starts a new file before a line would take the live one past this size;
	// 0 never rotates.
	RotateBytes int64
	// SigningKeyFile holds an Ed25519 key (see LoadSigningKey). Without it no checkpoints
	// are written and the log is only hash-chained.
	SigningKeyFile string
	// CheckpointEvents writes a signed checkpoint after this many lines (default 1000);
	// CheckpointInterval after this much time with new lines (default 1m). Negative disables.
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
		o.Fsync = FsyncAlways
	}
	if o.FsyncInterval == 0 {
		o.FsyncInterval = time.Second
	}
	if o.CheckpointEvents == 0 {
		o.CheckpointEvents = 1000
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = time.Minute
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

// Validate names the option at fault.
func (o *Options) Validate() error {
	if o.Path == "" {
		return fmt.Errorf("audit: path is required")
	}
	switch o.Fsync {
	case FsyncAlways, FsyncInterval, FsyncNever:
	default:
		return fmt.Errorf("audit: fsync %q: want always, interval or never", o.Fsync)
	}
	if o.FsyncInterval < 0 {
		return fmt.Errorf("audit: fsync_interval %s: must be positive", o.FsyncInterval)
	}
	if o.RotateBytes < 0 {
		return fmt.Errorf("audit: rotate_bytes %d: must not be negative", o.RotateBytes)
	}
	switch o.OnFailure {
	case OnFailureBlock, OnFailureBuffer:
	default:
		return fmt.Errorf("audit: on_failure %q: want block or buffer", o.OnFailure)
	}
	if o.BufferEvents < 0 {
		return fmt.Errorf("audit: buffer_events %d: must be positive", o.BufferEvents)
	}
	return nil
}
