// Package termsafe keeps a sandbox's bytes from acting on the operator's terminal beyond
// drawing on its screen.
//
// A sandboxed command's output is streamed to airlock's own stdout and stderr, often a
// terminal. Some escape sequences act beyond the screen: OSC 52 writes the clipboard, OSC
// 0/1/2 set the window title (which other sequences then read back into the terminal's
// input), OSC 8 makes links, DCS/APC/PM/SOS strings reach the terminal's own extensions
// (tmux passthrough, sixel, DECRQSS replies typed into the input), CSI ... t moves, resizes
// and reports the window. Some hide what follows or what came before: RIS (ESC c) and CSI 3
// J clear the scrollback, and ESC % switches the terminal out of UTF-8, after which raw C1
// bytes that the filter took for parts of UTF-8 characters act as controls (an 8-bit OSC
// 52). Writer drops those and passes everything else (text, colours, cursor movement)
// unchanged. Text quotes what airlock itself prints (errors, summaries) when it may hold
// bytes from a sandbox; Restore is what to send the terminal before printing it, so that
// it is seen whatever modes the sandbox's output left set.
package termsafe

import (
	"io"
	"slices"
	"strings"
)

// Bounds of the Writer's state.
const (
	maxSeq    = 64        // bytes of an escape or CSI sequence held before it is dropped
	maxString = 256 << 10 // bytes of an unterminated control string dropped before output resumes
)

type state uint8

const (
	ground     state = iota
	escape           // ESC held
	escInter         // ESC and intermediates held
	csi              // a CSI held until its final byte
	csiDiscard       // an overlong CSI being dropped up to its final byte
	str              // a control string (OSC, DCS, SOS, PM, APC, ESC k) being dropped
	strEsc           // ... after an ESC: ESC \ ends it
	strC2            // ... after 0xC2: C2 9C (U+009C, ST) ends it
	utf8Seq          // a multi-byte UTF-8 character held until complete
)

// Writer filters a stream for a terminal. It is streaming (a sequence may be split across
// writes in any way), holds at most maxSeq bytes, and each write to W ends on a boundary
// where the terminal is back in its ground state: never in the middle of an escape sequence
// or a UTF-8 character, and never starts with a byte that could complete one (C1 controls
// are not written alone), so that two Writers sharing one terminal (stdout and stderr)
// cannot complete each other's sequences. Other bytes pass unchanged (NULs and stray
// invalid bytes too), except an incomplete UTF-8 character, written as U+FFFD. A Writer is
// for one goroutine.
type Writer struct {
	W io.Writer

	st   state
	pend []byte // held bytes of an incomplete sequence or character
	need int    // utf8Seq: continuation bytes still expected
	drop int    // str: bytes dropped so far
	out  []byte
	alt  string // the alternate-screen mode ("1049", "1047", "47") the output left set, if any
}

// NewWriter returns a Writer that filters into w.
func NewWriter(w io.Writer) *Writer { return &Writer{W: w} }

// Write filters p into W. It consumes all of p; the error is W's.
func (f *Writer) Write(p []byte) (int, error) {
	f.out = f.out[:0]
	for _, b := range p {
		f.step(b)
	}
	return len(p), f.flushOut()
}

// Close ends the stream: an incomplete escape sequence is dropped, an incomplete UTF-8
// character written as U+FFFD. W is not closed.
func (f *Writer) Close() error {
	f.out = f.out[:0]
	if f.st == utf8Seq {
		f.out = append(f.out, replacement...)
	}
	f.pend, f.st = f.pend[:0], ground
	return f.flushOut()
}

func (f *Writer) flushOut() error {
	if len(f.out) == 0 || f.W == nil {
		return nil
	}
	_, err := f.W.Write(f.out)
	return err
}

var replacement = []byte("\ufffd")

const (
	esc = 0x1b
	bel = 0x07
	can = 0x18
	sub = 0x1a
)

// stringIntroducer reports whether ESC b (or the C1 control 0x40+b) starts a control
// string: DCS P, SOS X, OSC ], PM ^, APC _, and screen/tmux's title string ESC k.
func stringIntroducer(b byte) bool {
	switch b {
	case 'P', 'X', ']', '^', '_', 'k':
		return true
	}
	return false
}

func (f *Writer) step(b byte) {
	switch f.st {
	case ground:
		f.ground(b)
	case escape:
		switch {
		case b == esc:
			// ESC ESC: the first one means nothing; the second starts over.
		case stringIntroducer(b):
			f.startString()
		case b == '[':
			f.pend = append(f.pend, b)
			f.st = csi
		case b >= 0x20 && b <= 0x2f:
			f.pend = append(f.pend, b)
			f.st = escInter
		case b >= 0x30 && b <= 0x7e:
			if b != 'c' { // RIS: a full reset, which clears the scrollback
				f.out = append(append(f.out, f.pend...), b)
			}
			f.reset()
		default:
			// A control or a byte that ends no sequence: the ESC is dropped.
			f.reset()
			f.ground(b)
		}
	case escInter:
		switch {
		case b >= 0x20 && b <= 0x2f && len(f.pend) < maxSeq:
			f.pend = append(f.pend, b)
		case b >= 0x30 && b <= 0x7e:
			if f.pend[1] != '%' { // ESC % ...: leave UTF-8 (or enter another coding system)
				f.out = append(append(f.out, f.pend...), b)
			}
			f.reset()
		default:
			f.reset()
			f.ground(b)
		}
	case csi:
		switch {
		case b >= 0x20 && b <= 0x3f:
			if len(f.pend) >= maxSeq {
				f.reset()
				f.st = csiDiscard
				return
			}
			f.pend = append(f.pend, b)
		case b >= 0x40 && b <= 0x7e:
			if f.keepCSI(b) {
				f.out = append(append(f.out, f.pend...), b)
			}
			f.reset()
		default:
			f.reset()
			f.ground(b)
		}
	case csiDiscard:
		switch {
		case b >= 0x20 && b <= 0x3f:
		case b >= 0x40 && b <= 0x7e:
			f.reset()
		default:
			f.reset()
			f.ground(b)
		}
	case str, strEsc, strC2:
		f.inString(b)
	case utf8Seq:
		lo, hi := byte(0x80), byte(0xbf)
		if len(f.pend) == 1 {
			// The second byte's range excludes overlong forms, surrogates and values over
			// U+10FFFF (Unicode's table 3-7), as a strict decoder checks it.
			switch f.pend[0] {
			case 0xe0:
				lo = 0xa0
			case 0xed:
				hi = 0x9f
			case 0xf0:
				lo = 0x90
			case 0xf4:
				hi = 0x8f
			}
		}
		if b < lo || b > hi {
			// Not a continuation: the held bytes are an incomplete character, written as
			// U+FFFD (what a terminal shows for them) so that no write ends in a character
			// another writer's bytes could complete.
			f.out = append(f.out, replacement...)
			f.reset()
			f.ground(b)
			return
		}
		if len(f.pend) == 1 && f.pend[0] == 0xc2 && b <= 0x9f {
			// U+0080..U+009F: a C1 control in its UTF-8 form.
			f.reset()
			f.c1(b, []byte{0xc2, b})
			return
		}
		f.pend = append(f.pend, b)
		if f.need--; f.need == 0 {
			f.out = append(f.out, f.pend...)
			f.reset()
		}
	}
}

// keepCSI decides on the CSI held in pend, ending with final: CSI ... t (window moves,
// resizes and reports) and CSI 3 J (erase the scrollback) are dropped; the alternate
// screen modes are tracked, for Restore.
func (f *Writer) keepCSI(final byte) bool {
	params := string(f.pend)
	switch {
	case strings.HasPrefix(params, "\x1b["):
		params = params[2:]
	case strings.HasPrefix(params, "\xc2\x9b"):
		params = params[2:]
	default:
		params = params[1:] // 0x9b
	}
	private := strings.HasPrefix(params, "?")
	fields := strings.Split(strings.TrimLeft(params, "?<=>"), ";")
	for i, m := range fields {
		fields[i] = paramValue(m)
	}
	switch final {
	case 't':
		return false
	case 'J':
		return !slices.Contains(fields, "3")
	case 'h', 'l':
		if !private {
			break
		}
		for _, m := range fields {
			if m == "1049" || m == "1047" || m == "47" {
				if final == 'h' {
					f.alt = m
				} else {
					f.alt = ""
				}
			}
		}
	}
	return true
}

// paramValue is a CSI parameter as a terminal reads it: its sub-parameters (after ':') cut
// and its leading zeros dropped, so that "03" and "3:1" are the 3 they act as.
func paramValue(m string) string {
	m, _, _ = strings.Cut(m, ":")
	if t := strings.TrimLeft(m, "0"); t != "" || m == "" {
		return t
	}
	return "0"
}

// restoreBase is Restore's part that holds whatever the output did: attributes reset (no
// concealed, blinking or same-colour text), normal video, wrapping at the margin, the
// cursor shown, no mouse reporting, the G0 character set designated ASCII and invoked.
const restoreBase = "\x1b[0m\x1b[?5l\x1b[?7h\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b(B\x0f"

// Restore returns what to write to a terminal after the output of the given Writers
// (those sharing it: stdout and stderr), before a program prints its own lines there:
// restoreBase and, if the output left the terminal on its alternate screen, the way back
// to the normal one (as it was entered: 1049 also restores the cursor). A nil Writer
// (unfiltered output) adds nothing but restoreBase.
func Restore(ws ...*Writer) []byte {
	b := []byte(restoreBase)
	for _, w := range ws {
		if w != nil && w.alt != "" {
			b = append(b, "\x1b[?"+w.alt+"l"...)
		}
	}
	return b
}

func (f *Writer) ground(b byte) {
	switch {
	case b == esc:
		f.pend = append(f.pend[:0], b)
		f.st = escape
	case b >= 0x80 && b <= 0x9f:
		// Not part of a UTF-8 character here: a C1 control in its 8-bit form.
		f.c1(b, []byte{b})
	case b >= 0xc2 && b <= 0xf4:
		f.pend = append(f.pend[:0], b)
		f.st = utf8Seq
		switch {
		case b < 0xe0:
			f.need = 1
		case b < 0xf0:
			f.need = 2
		default:
			f.need = 3
		}
	default:
		f.out = append(f.out, b)
	}
}

// c1 handles the C1 control 0x80..0x9f (seq is how it was spelled): CSI is parsed like
// ESC [, string introducers drop their string, and the other C1 controls are dropped (a
// UTF-8 terminal shows nothing for them; an 8-bit one would act on them).
func (f *Writer) c1(b byte, seq []byte) {
	switch {
	case b == 0x9b:
		f.pend = append(f.pend[:0], seq...)
		f.st = csi
	case stringIntroducer(b - 0x40):
		f.startString()
	}
}

func (f *Writer) startString() {
	f.reset()
	f.st = str
}

// inString drops a control string up to its terminator: BEL, ST (ESC \, 0x9C, U+009C) or
// CAN/SUB. An ESC followed by anything else ends it too and starts a new sequence.
func (f *Writer) inString(b byte) {
	if f.drop++; f.drop > maxString {
		// Unterminated: give the output back. The terminal never saw the introducer.
		f.reset()
		f.ground(b)
		return
	}
	switch f.st {
	case strEsc:
		if b == '\\' {
			f.reset()
			return
		}
		f.reset()
		f.pend = append(f.pend, esc)
		f.st = escape
		f.step(b)
		return
	case strC2:
		if b == 0x9c {
			f.reset()
			return
		}
		f.st = str
	}
	switch b {
	case bel, can, sub, 0x9c:
		f.reset()
	case esc:
		f.st = strEsc
	case 0xc2:
		f.st = strC2
	}
}

func (f *Writer) reset() {
	f.pend = f.pend[:0]
	f.st = ground
	f.need = 0
	f.drop = 0
}
