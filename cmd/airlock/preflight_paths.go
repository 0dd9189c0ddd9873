package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/session"
)

// checkPaths are preflight's checks of the files and directories start-up writes: $AIRLOCK_HOME
// and its CA, the audit log, the decision log and the approval store. Each is checked without
// creating or changing anything: an existing file is opened as start-up opens it (for
// appending, or for reading and writing) and closed, and a missing one needs a directory
// airlock may write to, where start-up would create it.
func checkPaths(cfg *Config) []error {
	var errs []error
	// A home that cannot be made is one problem, not one more for each default under it.
	underBadHome := func(string) bool { return false }
	if err := dirProblem(cfg.Home, true); err != nil {
		errs = append(errs, fmt.Errorf("home: %w; want a directory airlock can keep its state in (the CA, the approval store, the audit log)", err))
		underBadHome = func(p string) bool { return strings.HasPrefix(p, cfg.Home+string(filepath.Separator)) }
	} else if err := checkCA(filepath.Join(cfg.Home, "ca")); err != nil {
		errs = append(errs, err)
	}
	if cfg.AuditLog != "-" && !underBadHome(cfg.AuditLog) {
		if err := fileProblem(cfg.AuditLog, true, os.O_WRONLY|os.O_APPEND); err != nil {
			errs = append(errs, fmt.Errorf("audit_log: %w; want a file airlock can create or append to (or - for no audit log)", err))
		} else if err := audit.CheckResume(cfg.AuditLog); err != nil {
			errs = append(errs, fmt.Errorf("audit_log: %w", err))
		}
	}
	if p := cfg.Audit.DecisionLog; p != "" {
		if err := fileProblem(p, false, os.O_WRONLY|os.O_APPEND); err != nil {
			errs = append(errs, fmt.Errorf("audit.decision_log: %w; want a file airlock can create or append to, in an existing directory", err))
		}
	}
	if err := approval.CheckStore(cfg.Approvals.Store); err != nil {
		errs = append(errs, fmt.Errorf("approvals.store: %w", err))
	}
	if p, ok := approval.SQLitePath(cfg.Approvals.Store); ok && !underBadHome(p) {
		err := fileProblem(p, true, os.O_RDWR)
		if err == nil {
			err = sqliteProblem(p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("approvals.store: %w; want sqlite:PATH of a database airlock can create or open for writing", err))
		}
	}
	return errs
}

// checkCA is loadOrInitCA short of writing: a CA there must load; none, it can be made.
func checkCA(dir string) error {
	_, err := ca.Load(dir)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("home: CA in %s: %w", dir, err)
	}
	if err := dirProblem(dir, true); err != nil {
		return fmt.Errorf("home: CA in %s: %w; want a directory airlock can create its CA in", dir, err)
	}
	return nil
}

// sessionsWarning is why start-up would go on without serving sandbox sessions (their state
// directory cannot be made), or nil.
func sessionsWarning(cfg *Config) error {
	dir := cfg.Sessions.StateDir
	if dir == "" {
		dir = session.DefaultStateDirForUser()
	}
	if err := dirProblem(dir, true); err != nil {
		return fmt.Errorf("sessions.state_dir: %w; want a directory airlock can create its sessions' records in (without one, the proxy serves no sandbox sessions)", err)
	}
	return nil
}

// fileProblem says why start-up could not open the file at path with flag (creating it when
// missing), without creating or changing anything: an existing regular file is opened with
// flag (without O_CREATE or O_TRUNC, which writes nothing) and closed; a missing one needs
// a directory to be made in (see dirProblem).
func fileProblem(path string, mkdirs bool, flag int) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory", path)
	case err == nil && fi.Mode().IsRegular():
		// O_NONBLOCK: should a named pipe replace the file meanwhile, the open fails or
		// returns at once instead of waiting for the other end.
		f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		return f.Close()
	case err == nil:
		return nil // a device (/dev/stdout): opening it may block or have effects
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return dirProblem(filepath.Dir(path), mkdirs)
	}
	return err
}

// dirProblem says why start-up could not create a file in dir: dir must be a directory
// airlock may write to or, when start-up creates the directories on the way (mkdirs),
// its nearest existing ancestor must be.
func dirProblem(dir string, mkdirs bool) error {
	want := filepath.Clean(dir)
	for p := want; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s is not a directory", p)
		case err == nil && p != want && !mkdirs:
			return fmt.Errorf("directory %s does not exist", want)
		case err == nil:
			if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("cannot create files in %s: %w", p, err)
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return err
		case filepath.Dir(p) == p:
			return nil
		}
	}
}

// sqliteProblem refuses an existing file that is not an SQLite database (start-up would
// fail to migrate it). An empty file is a new database.
func sqliteProblem(path string) error {
	// O_NONBLOCK: a named pipe put there opens at once instead of waiting for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	head := make([]byte, 16)
	n, err := io.ReadFull(f, head)
	if n == 0 {
		return nil
	}
	if err != nil || !bytes.Equal(head, []byte("SQLite format 3\x00")) {
		return fmt.Errorf("%s is not an SQLite database", path)
	}
	return nil
}
