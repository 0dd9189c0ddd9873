package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestScrubbedResponseLength is what docs/credentials.md says of Content-Length: a
// scrubbed response never carries the upstream's (its body may be shorter or longer once
// redacted); the sandbox gets the body chunked or with a Content-Length that counts the
// bytes it receives (always the latter for a body of up to 16 KiB whose length the
// upstream declared). A destination declared "reflects": false keeps the upstream's.
func TestScrubbedResponseLength(t *testing.T) {
	re := newReflectEnv(t)
	upstream := len("you sent " + re.canary + " to airlock's upstream\n")
	for kind, base := range re.bases {
		t.Run(kind, func(t *testing.T) {
			o := parse(re.exchange(t, base, "/echo/body", "", ""))
			if o.status != 200 || !strings.Contains(o.body, "[airlock:redacted]") || len(o.body) == upstream {
				t.Fatalf("got %d %q, want 200 and the body redacted to another length than the upstream's %d", o.status, o.body, upstream)
			}
			// A small body with a declared length is scrubbed whole and sent with its new
			// length, not chunked: in an intercepted tunnel each chunk's framing was a TLS
			// record and a write of its own.
			if cl := o.header.Get("Content-Length"); cl != strconv.Itoa(len(o.body)) {
				t.Errorf("scrubbed: Content-Length %q for a body of %d bytes (the upstream's was %d); want the scrubbed length", cl, len(o.body), upstream)
			}
			if head, _, _ := bytes.Cut(o.raw, []byte("\r\n\r\n")); bytes.Contains(bytes.ToLower(head), []byte("transfer-encoding")) {
				t.Errorf("scrubbed: sent chunked (%q); want a Content-Length", head)
			}
			o = parse(re.exchange(t, base, "/quiet/body", "", ""))
			if cl := o.header.Get("Content-Length"); o.status != 200 || cl != strconv.Itoa(upstream) || len(o.body) != upstream {
				t.Errorf("reflects false: got %d, Content-Length %q, body of %d; want 200 and the upstream's %d kept", o.status, cl, len(o.body), upstream)
			}
		})
	}
}
