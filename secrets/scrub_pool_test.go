package secrets

// The red team of the pooled stream buffers (streamPool, 2026-12-07), kept as tests: no
// body gets another's bytes or a held-back prefix, values split at every offset after a
// body that grew the buffers, every way a body ends, and no item handed out twice.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
	"unsafe"
)

const rtSecret = "sk-rtpool-Zq81xVb7Pm40LLa9"

// rtDrainPool takes up to n items out of streamPool and reports duplicates (the same item
// or the same chunk/pending/out array twice: a double Put or an item shared by two users).
func rtDrainPool(t *testing.T, n int) {
	t.Helper()
	seen := map[*streamBufs]bool{}
	arrays := map[uintptr]string{}
	var items []*streamBufs
	for range n {
		b := streamPool.Get().(*streamBufs)
		items = append(items, b)
		if seen[b] {
			t.Errorf("streamPool handed out item %p twice: a double Put", b)
		}
		seen[b] = true
		for name, s := range map[string][]byte{"chunk": b.chunk, "pending": b.pending, "out": b.out} {
			if cap(s) == 0 {
				continue
			}
			p := uintptr(unsafe.Pointer(unsafe.SliceData(s[:1])))
			if prev, ok := arrays[p]; ok {
				t.Errorf("the %s array of item %p is also %s of another item", name, b, prev)
			}
			arrays[p] = fmt.Sprintf("%s of %p", name, b)
		}
	}
	for _, b := range items {
		streamPool.Put(b)
	}
}

// Attack: a secret (in several encodings) placed across the 32 KiB chunk boundary at every
// offset, each body read right after a "dirty" body that left the pooled item holding a
// held-back secret prefix (an upstream error mid-value) and a grown out buffer.
func TestRTPoolSplitEveryOffsetAfterDirtyBody(t *testing.T) {
	s := newScrubber([]Secret{NewSecret(rtSecret)})
	encs := map[string]string{
		"plain": rtSecret,
		"b64":   base64.StdEncoding.EncodeToString([]byte(rtSecret)),
		"hex":   hex.EncodeToString([]byte(rtSecret)),
		"upper": strings.ToUpper(rtSecret),
		"pct":   strings.ReplaceAll(rtSecret, "-", "%2D"),
	}
	dirty := func() {
		// Many markers (out grows), then a prefix of the value, then a reset: the prefix is
		// held back in pending and dropped.
		in := strings.Repeat(rtSecret+".", 3000) + "xx" + rtSecret[:len(rtSecret)-1]
		r := s.Reader(io.NopCloser(io.MultiReader(strings.NewReader(in), iotest.ErrReader(errors.New("reset")))))
		got, err := io.ReadAll(r)
		if err == nil || strings.Contains(string(got), rtSecret[:len(rtSecret)-1]) {
			t.Fatalf("dirty body: err %v, prefix passed on: %v", err, strings.Contains(string(got), rtSecret[:len(rtSecret)-1]))
		}
	}
	for name, enc := range encs {
		for _, boundary := range []int{32 << 10, 64 << 10} {
			for off := boundary - len(enc) - 1; off <= boundary+1; off++ {
				dirty()
				in := strings.Repeat("a", off) + enc + strings.Repeat("b", 100)
				want := s.ScrubString(in)
				if strings.Contains(want, enc) {
					t.Fatalf("%s: reference did not redact", name)
				}
				for _, psize := range []int{1, 7, 32 << 10, 100 << 10} {
					r := s.Reader(io.NopCloser(&chunkReader{src: []byte(in), sizes: []int{off % 977, 32 << 10, 3}}))
					var got bytes.Buffer
					p := make([]byte, psize)
					for {
						n, err := r.Read(p)
						got.Write(p[:n])
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					if got.String() != want {
						t.Fatalf("%s at offset %d, p=%d: output differs from the whole-string scrub (len %d vs %d); leaks value: %v",
							name, off, psize, got.Len(), len(want), strings.Contains(got.String(), enc))
					}
				}
			}
		}
	}
	rtDrainPool(t, 32)
}

// Attack: every way a body can end, and reads after it (Read after EOF, after error, after
// Close, Close while a Read is blocked in the source, Uninspectable mid-stream, p of 0
// bytes), then check that the pool never hands out one item twice.
func TestRTPoolEndingsNoDoublePut(t *testing.T) {
	s := newScrubber([]Secret{NewSecret(rtSecret)})
	readAfter := func(r io.ReadCloser, k int) {
		p := make([]byte, 3)
		for range k {
			r.Read(p)
			r.Read(nil)
		}
	}
	for range 20 {
		// EOF, then more reads and Close, then more reads.
		r := s.Reader(io.NopCloser(strings.NewReader("hello " + rtSecret + " bye")))
		if got, err := io.ReadAll(r); err != nil || string(got) != "hello "+R+" bye" {
			t.Fatalf("got %q %v", got, err)
		}
		readAfter(r, 5)
		r.Close()
		readAfter(r, 5)

		// Error mid-stream, then reads.
		r = s.Reader(io.NopCloser(io.MultiReader(strings.NewReader(strings.Repeat("x", 40<<10)+rtSecret[:10]), iotest.ErrReader(errors.New("reset")))))
		if _, err := io.ReadAll(r); err == nil {
			t.Fatal("no error")
		}
		readAfter(r, 5)

		// Compressed payload signature mid-stream (after a secret prefix), then reads.
		in := strings.Repeat("y", 50<<10) + rtSecret[:12] + "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + rtSecret
		r = s.Reader(io.NopCloser(strings.NewReader(in)))
		got, err := io.ReadAll(r)
		var ue *UninspectableError
		if !errors.As(err, &ue) || strings.Contains(string(got), rtSecret[:12]) || strings.Contains(string(got), "\x1f\x8b") {
			t.Fatalf("uninspectable: err %v, %d bytes", err, len(got))
		}
		readAfter(r, 5)

		// Close while a Read is blocked in the source (a pipe), then Read again.
		pr, pw := io.Pipe()
		r = s.Reader(pr)
		done := make(chan struct{})
		go func() {
			defer close(done)
			p := make([]byte, 10)
			for {
				if _, err := r.Read(p); err != nil {
					return
				}
			}
		}()
		pw.Write([]byte(strings.Repeat("z", 1000) + rtSecret))
		time.Sleep(time.Millisecond)
		r.Close() // pipe reader Close: the blocked Read returns ErrClosedPipe
		<-done
		readAfter(r, 5)

		// Abandoned half way (never released), then closed.
		r = s.Reader(io.NopCloser(strings.NewReader(strings.Repeat("q", 100<<10))))
		r.Read(make([]byte, 100))
		r.Close()

		// Read only after Close.
		pr2, _ := io.Pipe()
		r = s.Reader(pr2)
		r.Close()
		readAfter(r, 3)
	}
	rtDrainPool(t, 64)
}

// Attack: readers interleaved on one goroutine, 1..k bytes at a time round-robin, starting
// and ending at different times, so an item released by one is taken by the next while
// others are mid-body. Each must get exactly its own scrubbed bytes.
func TestRTPoolInterleavedTinyReads(t *testing.T) {
	s := newScrubber([]Secret{NewSecret(rtSecret)})
	type rd struct {
		r         io.ReadCloser
		got       bytes.Buffer
		want      string
		done, bad bool
	}
	mk := func(i int) *rd {
		var b strings.Builder
		for j := 0; b.Len() < 20<<10+i*3001; j++ {
			fmt.Fprintf(&b, "<%d:%d>", i, j)
			if j%37 == i%37 {
				b.WriteString(rtSecret)
			}
		}
		in := b.String() + rtSecret[:i%len(rtSecret)]
		var src io.Reader = &chunkReader{src: []byte(in), sizes: []int{1 + i%5, 32 << 10, 17}}
		x := &rd{want: s.ScrubString(in)}
		if i%5 == 3 {
			src = io.MultiReader(src, iotest.ErrReader(errors.New("reset")))
			x.bad = true
		}
		x.r = s.Reader(io.NopCloser(src))
		return x
	}
	var active []*rd
	var all []*rd
	next := 0
	for step := 0; next < 60 || len(active) > 0; step++ {
		if next < 60 && (len(active) < 6 || step%50 == 0) {
			x := mk(next)
			next++
			active = append(active, x)
			all = append(all, x)
		}
		for _, x := range active {
			p := make([]byte, 1+(step%3)*1000)
			n, err := x.r.Read(p)
			x.got.Write(p[:n])
			if err != nil {
				x.done = true
				if x.bad == (err == io.EOF) {
					t.Fatalf("unexpected err %v", err)
				}
			}
		}
		keep := active[:0]
		for _, x := range active {
			if !x.done {
				keep = append(keep, x)
			}
		}
		active = keep
	}
	for i, x := range all {
		if x.bad {
			if !strings.HasPrefix(x.want, x.got.String()) {
				t.Errorf("reader %d (error): output is not a prefix of its own scrubbed body", i)
			}
		} else if x.got.String() != x.want {
			t.Errorf("reader %d: %d bytes, want %d (first diff at %d)", i, x.got.Len(), len(x.want), firstDiff(x.got.String(), x.want))
		}
		if strings.Contains(x.got.String(), rtSecret) {
			t.Errorf("reader %d: the value leaked", i)
		}
		// Another reader's tag in this one's output.
		for j := range all {
			if j != i && strings.Contains(x.got.String(), fmt.Sprintf("<%d:", j)) {
				t.Errorf("reader %d holds bytes of reader %d", i, j)
				break
			}
		}
	}
	rtDrainPool(t, 32)
}

func firstDiff(a, b string) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Attack: ScrubResponse's paths (scrubWhole for small declared lengths, streamed for the
// rest, gzip-decoded), many at once from several goroutines with two different scrubbers
// (two sandboxes, two values): no response gets the other's value or bytes.
func TestRTPoolScrubResponsePathsTwoSandboxes(t *testing.T) {
	secA, secB := "sk-sandboxA-aaaaaaaaaaaaaaaa1", "sk-sandboxB-bbbbbbbbbbbbbbbb2"
	sA, sB := newScrubber([]Secret{NewSecret(secA)}), newScrubber([]Secret{NewSecret(secB)})
	var wg sync.WaitGroup
	errs := make(chan string, 1000)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 40 {
				i := g*100 + k
				s, sec, other := sA, secA, secB
				if i%2 == 1 {
					s, sec, other = sB, secB, secA
				}
				tag := fmt.Sprintf("[resp %d]", i)
				size := []int{100, 10 << 10, 16 << 10, 40 << 10, 200 << 10}[k%5]
				var b strings.Builder
				for b.Len() < size {
					b.WriteString(tag + " " + sec + " ")
				}
				plain := b.String()
				body := []byte(plain)
				h := http.Header{"Content-Type": {"text/plain"}}
				if k%3 == 0 {
					body = gz(body)
					h.Set("Content-Encoding", "gzip")
				}
				resp := &http.Response{StatusCode: 200, Header: h, ContentLength: int64(len(body)),
					Body: io.NopCloser(&chunkReader{src: body, sizes: []int{1 + k, 32 << 10}})}
				if k%4 == 1 {
					resp.ContentLength = -1
				}
				if err := s.ScrubResponse(resp); err != nil {
					errs <- fmt.Sprintf("%d: %v", i, err)
					continue
				}
				got, err := io.ReadAll(iotest.OneByteReader(resp.Body))
				resp.Body.Close()
				if err != nil {
					errs <- fmt.Sprintf("%d: %v", i, err)
				}
				out := string(got)
				if out != s.ScrubString(plain) {
					errs <- fmt.Sprintf("%d: body differs from its own scrubbed bytes (%d vs %d)", i, len(out), len(plain))
				}
				if strings.Contains(out, sec) || strings.Contains(out, other) || strings.Contains(out, other[:12]) {
					errs <- fmt.Sprintf("%d: a value (own or the other sandbox's) in the output", i)
				}
				if strings.Count(out, "[resp ") != strings.Count(out, tag) {
					errs <- fmt.Sprintf("%d: another response's bytes", i)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	rtDrainPool(t, 64)
}
