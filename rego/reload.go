package rego

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/airlock-proxy/airlock/internal/redact"
)

// debounce is how long Watch waits after the last change in a policy directory before it
// reloads: editors and `git checkout` write several files in a burst.
const debounce = 200 * time.Millisecond

// fetch reads the configured policy source. It returns nil, nil when a bundle URL reports no
// change. Callers hold reloadMu (or are New).
func (e *Engine) fetch(ctx context.Context) (*policySource, error) {
	switch {
	case e.opts.Bundle != "" && isURL(e.opts.Bundle):
		return e.fetchBundleURL(ctx)
	case e.opts.Bundle != "":
		return e.fetchBundleFile()
	case e.opts.Dir != "":
		return loadDir(nil, e.opts.Dir, e.opts.Dir)
	default:
		// The shipped policy's tests are not run at load: they are compiled into this
		// binary with it and pass in its own test suite (TestShippedPolicyRegoTests), so
		// running them again on every start (a third of a one-shot sandbox run's policy
		// work) could only repeat that result. `airlock policy test` still runs them.
		return loadDir(withoutTests{ShippedPolicy()}, ".", "shipped policy")
	}
}

// Reload reads, compiles and tests the policy again and swaps it in. When the new policy does
// not compile or its tests fail, the last good policy stays in force, the error is logged,
// kept in Status and returned. Reloading an unchanged policy does nothing.
func (e *Engine) Reload(ctx context.Context) error {
	if _, err := e.snapshot(ctx); err != nil {
		return err // Start's load failed: there is no policy to reload
	}
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	cur := e.cur.Load()
	src, err := e.fetch(ctx)
	if err == nil && (src == nil || src.revision == cur.revision) {
		e.setError(nil)
		return nil
	}
	var snap *snapshot
	if err == nil {
		snap, err = load(ctx, src)
	}
	if err != nil {
		err = redact.Error(err)
		e.setError(err)
		e.log.Error("policy reload refused; keeping the last good policy", "revision", cur.revision, "err", err)
		return fmt.Errorf("reload policy (keeping revision %s): %w", cur.revision, err)
	}
	if e.opts.NoDecisionCache {
		snap.cache = nil
	}
	e.cur.Store(snap)
	e.setError(nil)
	e.log.Info("policy reloaded", "source", snap.source, "revision", snap.revision, "previous", cur.revision)
	return nil
}

func (e *Engine) setError(err error) {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	if err == nil {
		e.lastErr, e.lastErrTime = "", time.Time{}
		return
	}
	e.lastErr, e.lastErrTime = redact.Text(err.Error()), time.Now()
}

// Watch reloads the policy when it changes, until ctx is done: a policy directory is watched
// with fsnotify (changes debounced), a bundle file or URL is polled every Options.Poll. The
// shipped policy never changes. SIGHUP handling is the caller's: call Reload.
func (e *Engine) Watch(ctx context.Context) {
	if _, err := e.snapshot(ctx); err != nil {
		<-ctx.Done() // Start's load failed (or its options were refused): nothing to watch
		return
	}
	switch {
	case e.opts.Dir != "":
		if err := e.watchDir(ctx); err != nil {
			e.log.Warn("cannot watch the policy directory; polling it instead", "dir", e.opts.Dir, "err", err)
			e.poll(ctx)
		}
	case e.opts.Bundle != "":
		e.poll(ctx)
	default:
		<-ctx.Done()
	}
}

func (e *Engine) poll(ctx context.Context) {
	t := time.NewTicker(e.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = e.Reload(ctx) // logged and kept in Status
		}
	}
}

func (e *Engine) watchDir(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policy directory: %w", err)
	}
	defer w.Close()
	if err := addTree(w, e.opts.Dir); err != nil {
		return err
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Create) {
				// A new subdirectory may hold data documents: watch it too.
				_ = addTree(w, ev.Name)
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			e.log.Warn("policy directory watch error", "dir", e.opts.Dir, "err", err)
			timer.Reset(debounce)
		case <-timer.C:
			_ = e.Reload(ctx) // logged and kept in Status
		}
	}
}

// addTree watches dir and every directory below it (not hidden ones).
func addTree(w *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != dir && len(d.Name()) > 0 && d.Name()[0] == '.' {
			return filepath.SkipDir
		}
		if err := w.Add(path); err != nil {
			return fmt.Errorf("watch %s: %w", path, err)
		}
		return nil
	})
}
