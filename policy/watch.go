package policy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce groups the burst of events one save produces (editors write,
// rename and chmod) into one reload; watchMaxDelay bounds how long a stream
// of events can hold a reload back.
const (
	watchDebounce = 100 * time.Millisecond
	watchMaxDelay = 500 * time.Millisecond
)

// Watch reloads when a file under Options.Dirs changes and, with a bundle,
// polls the bundle server every poll_seconds (ETag: an unchanged bundle is
// not downloaded again). Failures are logged and kept in Status; the
// previous policies keep serving. Watch returns nil when ctx is done, or an
// error if the directories cannot be watched.
func (e *Engine) Watch(ctx context.Context) error {
	var events <-chan fsnotify.Event
	var errs <-chan error
	var w *fsnotify.Watcher
	if len(e.opts.Dirs) > 0 {
		var err error
		if w, err = fsnotify.NewWatcher(); err != nil {
			return fmt.Errorf("watching policy dirs: %w", err)
		}
		defer w.Close()
		for _, d := range e.opts.Dirs {
			if err := addTree(w, d); err != nil {
				return fmt.Errorf("watching policy dir %s: %w", d, err)
			}
		}
		events, errs = w.Events, w.Errors
	}
	var poll <-chan time.Time
	if e.bundle != nil {
		t := time.NewTicker(e.bundle.cfg.poll())
		defer t.Stop()
		poll = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var pendingSince time.Time // first event not yet reloaded; zero when none
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if ev.Has(fsnotify.Create) {
				if info, err := os.Stat(ev.Name); err == nil && info.IsDir() {
					_ = addTree(w, ev.Name) // a new subdirectory: watch it too
				}
			}
			if pendingSince.IsZero() {
				pendingSince = time.Now()
			}
			if time.Since(pendingSince) < watchMaxDelay {
				debounce.Reset(watchDebounce)
			}
		case err := <-errs:
			e.log.Error("watching policy dirs", "error", err.Error())
		case <-debounce.C:
			pendingSince = time.Time{}
			_ = e.rebuild(ctx) // logged and kept in Status by rebuild
		case <-poll:
			if changed, err := e.fetchBundle(ctx); err == nil && changed {
				_ = e.rebuild(ctx)
			}
		}
	}
}

// ReloadOnSignal calls Reload each time sig delivers (the app wires SIGHUP
// to it) until ctx is done. Failures are logged and kept in Status.
func (e *Engine) ReloadOnSignal(ctx context.Context, sig <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sig:
			e.log.Info("reloading policies", "signal", s.String())
			_ = e.Reload(ctx) // logged and kept in Status by Reload
		}
	}
}

// addTree watches dir and its subdirectories (hidden ones skipped, except
// Kubernetes' ..data indirection which fsnotify sees through the parent).
func addTree(w *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		return w.Add(path)
	})
}
