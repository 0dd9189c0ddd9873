// Package output captures a sandboxed command's output: streamed on, and kept up to a bound.
package output

import "io"

// Capture streams everything to W (when not nil) and keeps the first Limit bytes.
type Capture struct {
	W     io.Writer
	Limit int

	buf     []byte
	dropped bool
}

// Write never fails: a failing W stops streaming, not the command.
func (c *Capture) Write(p []byte) (int, error) {
	room := c.Limit - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
	} else {
		c.buf = append(c.buf, p[:max(room, 0)]...)
		c.dropped = true
	}
	if c.W != nil {
		if _, err := c.W.Write(p); err != nil {
			c.W = nil
		}
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (c *Capture) Bytes() []byte { return c.buf }

// Dropped reports whether output beyond Limit was not kept.
func (c *Capture) Dropped() bool { return c.dropped }
