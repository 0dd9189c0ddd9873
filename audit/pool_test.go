package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// Encoded bodies share buffers (bodyPool) once their lines are built. A buffer given back
// while its body still waited to be written would let a later record overwrite it: the
// line would still chain and verify, with another record's fields in it. Each record here
// is unique (its path), decisions and completions interleave from many goroutines (the
// completions take the deferred path), and a write failure in buffer mode keeps bodies
// waiting in the buffer across later records: every record must be in the file exactly
// once, whole, and every id drawn must be distinct.
func TestPooledBodiesKeepEveryRecordWhole(t *testing.T) {
	for _, mode := range []string{OnFailureBlock, OnFailureBuffer} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.jsonl")
			s := openSink(t, Options{Path: path, OnFailure: mode, BufferEvents: 100000})
			const workers, each = 8, 400
			want := map[string]bool{}
			var mu sync.Mutex
			run := func(round int) {
				var wg sync.WaitGroup
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range each {
							ev := testEvent(i)
							ev.Path = fmt.Sprintf("/r%d/w%d/%d/%s", round, w, i, strings.Repeat("p", i%700))
							ev.Reason = strings.Repeat("why ", i%250) // under MaxReasonBytes: kept whole
							if i%2 == 1 {
								ev.Stage = StageCompletion
							}
							if err := s.Record(context.Background(), ev); err != nil {
								if mode == OnFailureBlock {
									continue // refused: not on record, and not expected
								}
								t.Errorf("Record: %v", err)
								return
							}
							mu.Lock()
							// A completion's Record returns before its write: in block mode one
							// queued when the write failed is lost (and logged), not refused.
							want[ev.Path+"|"+ev.Reason] = mode == OnFailureBuffer || ev.Stage != StageCompletion
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			run(0)
			s.acquire()
			_ = s.f.Close() // the next write fails; buffer mode keeps the bodies until one works
			s.release()
			run(1)
			run(2)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if mode == OnFailureBuffer && len(want) != 3*workers*each {
				t.Fatalf("%d records accepted, want %d", len(want), 3*workers*each)
			}

			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
			seen, ids := map[string]bool{}, map[string]bool{}
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var ev Event
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					t.Fatalf("line does not parse: %v: %.200s", err, sc.Text())
				}
				key := ev.Path + "|" + ev.Reason
				if _, ok := want[key]; !ok {
					t.Fatalf("line holds a record nobody made (mixed buffers?): %.200s", sc.Text())
				}
				if seen[key] {
					t.Fatalf("record written twice: %.200s", sc.Text())
				}
				seen[key] = true
				if !hexID.MatchString(ev.ID) || ids[ev.ID] {
					t.Fatalf("id %q is malformed or drawn twice", ev.ID)
				}
				ids[ev.ID] = true
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			for key, must := range want {
				if must && !seen[key] {
					t.Fatalf("record %.100s accepted but not in the file", key)
				}
			}
			if _, err := Verify([]string{path}, nil); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}
