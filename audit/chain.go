package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Genesis is the "prev" of the first line of a chain: 64 zeros (the width of a SHA-256).
// Every later line's "prev" is the hex SHA-256 of the previous line's bytes without its
// newline, across rotated files too; "seq" counts lines from 1 without gaps.
var Genesis = strings.Repeat("0", 64)

// checkpointLine is a signed checkpoint line, of kind event.KindCheckpoint:
//
//	{"seq":N,"prev":H,"kind":"checkpoint","v":2,"time":T,"hash":H,"sig":S,"key_id":K,"final":true}
//
// hash equals prev, the hash of line N-1, which by the chain commits to every line before
// the checkpoint; sig is the base64 Ed25519 signature of
// "airlock-audit-checkpoint-v2\n<seq>\n<hash>\n<time>\n<final: 0 or 1>\n". final is set on
// the checkpoint written by Close and before a rotation, so a file that ends in one was
// closed cleanly; it is signed, so a log cut after a periodic checkpoint cannot be made to
// look sealed. Version 1 checkpoints (no "v") signed "airlock-audit-checkpoint-v1\n<seq>\n<hash>\n"
// and still verify, but their final flag is not signed and does not seal a log.
type checkpointLine struct {
	Seq   uint64     `json:"seq"`
	Prev  string     `json:"prev"`
	Kind  event.Kind `json:"kind"`
	V     int        `json:"v"`
	Time  string     `json:"time"`
	Hash  string     `json:"hash"`
	Sig   string     `json:"sig"`
	KeyID string     `json:"key_id"`
	Final bool       `json:"final,omitempty"`
}

// checkpointVersion is the version the sink writes.
const checkpointVersion = 2

// lineHead is what the chain needs from any line.
// Its checkpoint fields are set on a checkpoint only; an event's line also has a stage
// and a request id.
type lineHead struct {
	checkpointLine
	Stage     Stage  `json:"stage"`
	RequestID string `json:"request_id"`
}

func lineHash(line []byte) string {
	h := sumLine(line)
	return string(h[:])
}

// lineSum is a line's hash as the next line's "prev" holds it: the hex SHA-256 of the line
// without its newline. The sink keeps the chain's last one as an array, written straight
// into the next line, not as a string allocated for every line.
type lineSum [64]byte

func sumLine(line []byte) (h lineSum) {
	sum := sha256.Sum256(bytes.TrimSuffix(line, []byte("\n")))
	hex.Encode(h[:], sum[:])
	return h
}

// genesisSum is Genesis as a lineSum.
var genesisSum = func() (h lineSum) {
	copy(h[:], Genesis)
	return h
}()

// hexString is hex.EncodeToString with one allocation instead of two (it is called twice
// for every record). b is at most 32 bytes.
func hexString(b []byte) string {
	var buf [64]byte
	n := hex.Encode(buf[:], b)
	return string(buf[:n])
}

// eventBody encodes an event's fields as a JSON object (id, when not nil, in place of
// ev.ID), in a buffer from bodyPool. It needs no chain position, so callers encode
// outside the sink's lock; appendLine puts seq and prev in front.
func eventBody(ev *Event, id *[16]byte) ([]byte, error) {
	var body []byte
	if h, _ := bodyPool.Get().(*[]byte); h != nil {
		body, *h = (*h)[:0], nil
		holderPool.Put(h) // for releaseBody to fill again
	} else {
		body = make([]byte, 0, 1024)
	}
	body, err := appendEventJSON(body, ev, id)
	if err != nil {
		return nil, fmt.Errorf("encode audit event: %w", err)
	}
	return body, nil
}

// bodyPool holds encoded bodies' buffers once their lines are built (releaseBody): a
// record's body is about 600 bytes, two per forwarded request, and allocating each from
// nothing (512 bytes, then grown) was a third of the encoding's cost.
// Its items are never empty; holderPool keeps the emptied *[]byte holders, so that giving
// a buffer back allocates nothing either.
var bodyPool, holderPool sync.Pool

// maxPooledBody bounds the buffers bodyPool keeps: a body with a long path, query and
// reason reaches about 6 KiB; a larger one (a label-heavy record) is left to the collector.
const maxPooledBody = 8 << 10

// releaseBody gives a body's buffer back once its line is in the file: nothing reads the
// body again (a body whose write failed stays in its batch or the failure buffer instead).
func releaseBody(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBody {
		return
	}
	h, _ := holderPool.Get().(*[]byte)
	if h == nil {
		h = new([]byte)
	}
	*h = b[:0]
	bodyPool.Put(h)
}

// appendLine appends the line for an encoded body at chain position (seq, prev): seq and
// prev first, then the body's fields, then a newline.
func appendLine(dst []byte, seq uint64, prev lineSum, body []byte) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"prev":"`...)
	dst = append(dst, prev[:]...)
	dst = append(dst, `",`...)
	dst = append(dst, body[1:]...)
	return append(dst, '\n')
}

// chainState is where a chain stands: the last line's seq and hash, and whether it is a
// final checkpoint (the file is sealed).
type chainState struct {
	seq   uint64
	hash  lineSum
	final bool
}

func (c chainState) next() (uint64, lineSum) {
	if c.seq == 0 {
		return 1, genesisSum
	}
	return c.seq + 1, c.hash
}

// errIncomplete reports a file whose last line has no newline (a crash or a cut mid-write).
var errIncomplete = errors.New("last line is incomplete (no newline): the file was cut or a write did not finish")

// lastLine returns the last complete line of a file, or nil when the file is empty.
func lastLine(path string) ([]byte, error) {
	// O_NONBLOCK: a named pipe opens at once (and is not read) instead of waiting for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() == 0 {
		return nil, nil
	}
	size := st.Size()
	var tail []byte
	for chunk := int64(4096); ; chunk *= 2 {
		off := max(size-chunk, 0)
		tail = make([]byte, size-off)
		if _, err := f.ReadAt(tail, off); err != nil && err != io.EOF {
			return nil, err
		}
		if tail[len(tail)-1] != '\n' {
			return nil, errIncomplete
		}
		if i := bytes.LastIndexByte(tail[:len(tail)-1], '\n'); i >= 0 {
			return tail[i+1:], nil
		}
		if off == 0 {
			return tail, nil
		}
	}
}

// stateOf reads where the chain of a file ends.
func stateOf(path string) (chainState, bool, error) {
	line, err := lastLine(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return chainState{}, false, nil
		}
		return chainState{}, false, fmt.Errorf("read audit log %s: %w", path, err)
	}
	if line == nil {
		return chainState{}, false, nil
	}
	var h lineHead
	if err := json.Unmarshal(line, &h); err != nil || h.Seq == 0 {
		return chainState{}, false, fmt.Errorf("audit log %s: last line is not an audit line (no seq); verify it and move it aside", path)
	}
	// A version 1 final checkpoint did not sign its flag: the next Close seals again.
	return chainState{seq: h.Seq, hash: sumLine(line), final: h.Kind == event.KindCheckpoint && h.Final && h.V >= 2}, true, nil
}

// resumeState finds where the chain of path ends: its own last line, or when it is empty
// or missing, the highest-seq last line among its rotated siblings (path.*).
func resumeState(path string) (chainState, error) {
	st, ok, err := stateOf(path)
	if err != nil || ok {
		return st, err
	}
	sibs, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return chainState{}, fmt.Errorf("list rotated audit logs of %s: %w", path, err)
	}
	var best chainState
	for _, s := range sibs {
		if !isRotatedName(path, s) {
			continue
		}
		st, ok, err := stateOf(s)
		if err != nil {
			return chainState{}, err
		}
		if ok && st.seq > best.seq {
			best = st
		}
	}
	return best, nil
}

func isRotatedName(path, candidate string) bool {
	rest, ok := strings.CutPrefix(candidate, path+".")
	if !ok || len(rest) < 16 {
		return false
	}
	return rest[0] >= '0' && rest[0] <= '9' && strings.Contains(rest, "T")
}

func globEscape(p string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(p)
}
