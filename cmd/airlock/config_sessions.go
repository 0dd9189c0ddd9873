package main

import (
	"fmt"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// SessionsConfig bounds the sandbox sessions `airlock proxy` serves on its admin API.
type SessionsConfig struct {
	TTL         time.Duration `yaml:"ttl"`          // default lifetime of a session (default 1h)
	IdleTimeout time.Duration `yaml:"idle_timeout"` // default idle timeout (default 15m)
	MaxTTL      time.Duration `yaml:"max_ttl"`      // longest ttl a create may ask for (default 24h)
	// MaxIdleTimeout is the longest idle_timeout a create may ask for (default max_ttl).
	MaxIdleTimeout time.Duration `yaml:"max_idle_timeout"`
	MaxSessions    int           `yaml:"max_sessions"`   // live sessions at most (default 32)
	MaxFileBytes   string        `yaml:"max_file_bytes"` // largest file got through the API (default 8M)
	StateDir       string        `yaml:"state_dir"`      // owner records, shared by the replicas of a machine (default /run/airlock/sessions)
	Owner          string        `yaml:"owner"`          // how other replicas name this one (default host:pid)
	// WorkspaceRoots are the host directories a session's workspace may be or lie under
	// (none: sessions get no workspace).
	WorkspaceRoots []string `yaml:"workspace_roots"`
	// RootfsRoots are the host directories a native session's rootfs, or an image named by
	// path, may be or lie under (none: only images of the local Docker engine).
	RootfsRoots []string `yaml:"rootfs_roots"`
}

func (c SessionsConfig) validate() error {
	switch {
	case c.TTL < 0:
		return fmt.Errorf("sessions.ttl: %s: want a positive duration", c.TTL)
	case c.IdleTimeout < 0:
		return fmt.Errorf("sessions.idle_timeout: %s: want a positive duration", c.IdleTimeout)
	case c.MaxTTL < 0:
		return fmt.Errorf("sessions.max_ttl: %s: want a positive duration", c.MaxTTL)
	case c.MaxIdleTimeout < 0:
		return fmt.Errorf("sessions.max_idle_timeout: %s: want a positive duration", c.MaxIdleTimeout)
	case c.MaxTTL > 0 && c.TTL > c.MaxTTL:
		return fmt.Errorf("sessions.ttl: %s is longer than sessions.max_ttl %s", c.TTL, c.MaxTTL)
	case c.MaxIdleTimeout > 0 && c.IdleTimeout > c.MaxIdleTimeout:
		return fmt.Errorf("sessions.idle_timeout: %s is longer than sessions.max_idle_timeout %s", c.IdleTimeout, c.MaxIdleTimeout)
	case c.MaxSessions < 0:
		return fmt.Errorf("sessions.max_sessions: %d: want a positive number", c.MaxSessions)
	}
	if c.MaxFileBytes != "" {
		if _, err := sandbox.ParseSize(c.MaxFileBytes); err != nil {
			return fmt.Errorf("sessions.max_file_bytes: %w", err)
		}
	}
	return nil
}

func (c SessionsConfig) maxFileBytes() int64 {
	n, _ := sandbox.ParseSize(c.MaxFileBytes)
	return n
}
