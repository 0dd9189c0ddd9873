package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// allocateSlot reserves a host uid range for a sandbox: slot N owns the 65536 host ids from
// 100000+N*65536. The slot file holds the sandbox id and the state directory it belongs to,
// and disappears on Close or on that state directory's Cleanup.
// SlotDir holds the host uid ranges in use, for every airlock on the machine whatever
// its state directory: two sandboxes never share host uids.
const (
	SlotDir      = legacyOwner + "/slots"
	legacyOwner  = "/run/airlock" // the owner of slots written before slots named theirs
	uidRangeBase = 100000
	UIDRangeSize = 65536 // host uids of one range: a sandbox's whole user namespace
	uidSlots     = 32000
)

func allocateSlot(dir, id, state string) (string, int, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("create slot directory: %w", err)
	}
	start := rand.IntN(uidSlots)
	for i := 0; i < uidSlots; i++ {
		n := (start+i)%uidSlots + 1
		path := filepath.Join(dir, strconv.Itoa(n))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if os.IsExist(err) {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("reserve uid range: %w", err)
		}
		_, err = f.WriteString(id + "\n" + filepath.Clean(state) + "\n")
		f.Close()
		if err != nil {
			os.Remove(path)
			return "", 0, fmt.Errorf("reserve uid range: %w", err)
		}
		return path, uidRangeBase + n*UIDRangeSize, nil
	}
	return "", 0, errors.New("reserve uid range: all slots in use")
}

// freeSlots frees the uid slots reserved under owner (a state directory) whose sandbox has
// no directory (dirOf(id)) left. A slot younger than a minute may belong to a sandbox being
// created right now (its directory not yet made, or the slot file not yet written): it
// stays.
func freeSlots(owner string, dirOf func(id string) string) {
	slots, _ := os.ReadDir(SlotDir)
	for _, s := range slots {
		path := filepath.Join(SlotDir, s.Name())
		b, err := os.ReadFile(path)
		if err != nil || recent(path) {
			continue
		}
		id, o, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if o == "" {
			o = legacyOwner // written before slots named their state directory
		}
		if o != filepath.Clean(owner) || id == "" || strings.ContainsAny(id, "/") || exists(dirOf(id)) {
			continue // another airlock's, or its sandbox is alive or not yet cleaned up
		}
		_ = os.Remove(path)
	}
}

// ReserveUIDRange reserves a host uid range of its own for a sandbox of another backend,
// machine-wide, as native sandboxes' are (SlotDir): the sandbox's processes then run as
// uids of no other sandbox and of no user of the host, and what the kernel counts per user
// (inotify, queued signals...) is theirs alone. base is the range's first uid; owner is the
// backend's state directory, where owner/id exists while the sandbox lives (FreeUIDRanges
// frees the others). release frees the range.
func ReserveUIDRange(id, owner string) (base int, release func(), err error) {
	path, base, err := allocateSlot(SlotDir, id, owner)
	if err != nil {
		return 0, nil, err
	}
	return base, func() { _ = os.Remove(path) }, nil
}

// FreeUIDRanges frees the ranges ReserveUIDRange reserved under owner whose sandbox has no
// directory owner/id left (its airlock died without closing it).
func FreeUIDRanges(owner string) {
	freeSlots(owner, func(id string) string { return filepath.Join(owner, id) })
}

// FreeUIDRangesFunc frees the ranges reserved under owner whose sandbox has no directory
// sandboxDir(id) left, for a backend that keeps its sandboxes' directories elsewhere than
// owner/id (the native one: owner/sandboxes/id).
func FreeUIDRangesFunc(owner string, sandboxDir func(id string) string) {
	freeSlots(owner, sandboxDir)
}

// recent spares a slot younger than a minute: its sandbox may be being created right now.
func recent(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && time.Since(fi.ModTime()) < time.Minute
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// ReclaimUIDRange finds the range ReserveUIDRange reserved for sandbox id under owner (by
// an earlier process that took the sandbox and died) and returns the function that frees
// it; nil when there is none.
func ReclaimUIDRange(id, owner string) (release func()) {
	slots, _ := os.ReadDir(SlotDir)
	for _, s := range slots {
		path := filepath.Join(SlotDir, s.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if sid, o, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); sid == id && o == filepath.Clean(owner) {
			return func() { _ = os.Remove(path) }
		}
	}
	return nil
}
