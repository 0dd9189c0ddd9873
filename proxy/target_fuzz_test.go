package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-proxy/airlock/internal/identity"
)

// pyReader is one long-lived python3 running testdata/urlread.py: a target per line in, what
// urllib.parse reads per line out.
type pyReader struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

type pyRead struct {
	Path        string      `json:"path"`
	DecodedPath string      `json:"decoded_path"`
	Query       string      `json:"query"`
	Fragment    string      `json:"fragment"`
	Pairs       [][2]string `json:"pairs"`
	Error       string      `json:"error"`
}

func startPyReader(f *testing.F) *pyReader {
	f.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		f.Skip("python3 not found: the differential fuzz target compares with Python's urllib.parse (scripts/test.sh installs python3)")
	}
	cmd := exec.Command(py, "testdata/urlread.py")
	in, err := cmd.StdinPipe()
	if err != nil {
		f.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		in.Close() // python exits at the end of its input
		_ = cmd.Wait()
	})
	return &pyReader{in: in, out: bufio.NewReader(out)}
}

func (p *pyReader) read(t *testing.T, target string) pyRead {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := json.Marshal(target)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("write to python: %v", err)
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read from python: %v", err)
	}
	var r pyRead
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("python answered %q: %v", line, err)
	}
	return r
}

// targetSeeds are request targets with every ambiguous form the parser handles.
var targetSeeds = []string{
	"/p?x=1;admin=true", "/p?x=1%3Badmin=true", "/p?a=1&&b=2&", "/p?", "/p?flag", "/p?=x",
	"/p?a=%zz", "/p?a=b+c%20d%2B", "/p?a=1&a=2&b=3&a=4", "/p?a=%00", "/p?a%01b=1", "/p?a=%01",
	"/p?a=%FF", "/p?a=1#frag", "/p?a=b=c", "/p?\u00e9=\u00fc", "/p?a=1%03force%04true",
	"/p?a=1?b=2", "/p?a=/x:y@z,w", "/public/..%2Fadmin", "/a;b/c", "/a\\b", "/a%5cb",
	"/public%2F..%2Fadmin", "/api/v4/projects/group%2fproject", "/\u00e9", "/a\"b<c>",
	"/a[b]", "/a/%252e%252e/x", "/%61dmin/%7e", "/a:b@c!$&'()*+,=", "//x/./y/../z",
	"http://upstream.test?x=1/y", "http://upstream.test/p?q=1", "*",
}

// FuzzTargetDifferential: for any request target the proxy accepts, the path and query in
// the policy input are what two independent parsers read from the forwarded target: Go's
// net/url (and net/http's request parser) and Python's urllib.parse (urlsplit, parse_qsl).
func FuzzTargetDifferential(f *testing.F) {
	py := startPyReader(f)
	for _, s := range targetSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, target string, inTunnel bool) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: upstream.test\r\n\r\n")))
		if err != nil {
			return
		}
		var tun *tunnel
		if inTunnel {
			tun = &tunnel{host: "upstream.test", port: 443}
			if !r.URL.IsAbs() {
				r.URL.Scheme, r.URL.Host = "https", r.Host
			}
		}
		tg, refused := (&Proxy{}).resolveTarget(r, tun)
		if refused != nil {
			if refused.status != http.StatusBadRequest && refused.status != http.StatusMisdirectedRequest || refused.reason == "" {
				t.Fatalf("refusal without a 400/421 or a reason: %+v", refused)
			}
			return
		}
		in := requestInput(identity.Identity{ID: "sbx"}, r, tg)
		sent := r.URL.RequestURI()
		var policyPairs [][2]string
		for _, p := range tg.query {
			policyPairs = append(policyPairs, [2]string{p.name, p.value})
		}

		// Go's net/url, and net/http reading the request line an upstream gets.
		u, err := url.ParseRequestURI(sent)
		if err != nil {
			t.Fatalf("forwarded %q, which net/url cannot parse: %v", sent, err)
		}
		if u.EscapedPath() != in.Request.Path {
			t.Fatalf("forwarded %q: net/url path %q, policy saw %q", sent, u.EscapedPath(), in.Request.Path)
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			t.Fatalf("forwarded %q: net/url query error %v", sent, err)
		}
		if !sameQuery(q, in.Request.Query) {
			t.Fatalf("forwarded %q: net/url reads query %q, policy saw %q", sent, q, in.Request.Query)
		}
		up, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + sent + " HTTP/1.1\r\nHost: upstream.test\r\n\r\n")))
		if err != nil {
			t.Fatalf("forwarded %q, which net/http cannot read: %v", sent, err)
		}
		if up.URL.EscapedPath() != in.Request.Path || !sameQuery(up.URL.Query(), in.Request.Query) {
			t.Fatalf("forwarded %q: net/http reads %q %q, policy saw %q %q", sent, up.URL.EscapedPath(), up.URL.Query(), in.Request.Path, in.Request.Query)
		}

		// Python's urllib.parse.
		p := py.read(t, sent)
		switch {
		case p.Error != "":
			t.Fatalf("forwarded %q, which Python cannot read: %s", sent, p.Error)
		case p.Path != in.Request.Path:
			t.Fatalf("forwarded %q: Python path %q, policy saw %q", sent, p.Path, in.Request.Path)
		case p.DecodedPath != u.Path:
			t.Fatalf("forwarded %q: Python decodes the path to %q, Go to %q", sent, p.DecodedPath, u.Path)
		case p.Fragment != "":
			t.Fatalf("forwarded %q: Python reads a fragment %q", sent, p.Fragment)
		case len(p.Pairs) != len(policyPairs) || len(p.Pairs) > 0 && !reflect.DeepEqual(p.Pairs, policyPairs):
			t.Fatalf("forwarded %q: Python reads pairs %q, policy saw %q", sent, p.Pairs, policyPairs)
		}
	})
}

// sameQuery compares two query maps, no query and an empty one being the same.
func sameQuery(a, b map[string][]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}
