package secrets

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"text/template"
)

// Injection kinds.
const (
	injectHeader = "header"
	injectQuery  = "query"
	injectBasic  = "basic"
)

// injector is a validated, compiled Inject.
type injector struct {
	kind  string // injectHeader, injectQuery, injectBasic
	name  string // header (canonical) or query parameter name
	value *template.Template
	user  *template.Template
	pass  *template.Template
}

var templateFuncs = template.FuncMap{
	"base64":    func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	"trimSpace": strings.TrimSpace,
}

func parseTemplate(key, name, text string) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, keyErr(key, "required")
	}
	t, err := template.New(name).Option("missingkey=error").Funcs(templateFuncs).Parse(text)
	if err != nil {
		return nil, keyErr(key, "%v", err)
	}
	return t, nil
}

// compile validates the injection and parses its templates.
func (in Inject) compile(name string) (*injector, error) {
	kinds := 0
	for _, set := range []bool{in.Header != "", in.Query != "", in.Basic != nil} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return nil, keyErr("inject", "exactly one of header, query, basic is required, got %d", kinds)
	}
	var err error
	j := &injector{}
	switch {
	case in.Header != "":
		if !headerToken.MatchString(in.Header) {
			return nil, keyErr("inject.header", "%q is not a valid header name", in.Header)
		}
		j.kind, j.name = injectHeader, textproto.CanonicalMIMEHeaderKey(in.Header)
		if slices.Contains(forbiddenHeaders, j.name) {
			return nil, keyErr("inject.header", "%q is a hop-by-hop or framing header", in.Header)
		}
		j.value, err = parseTemplate("inject.value", name, in.Value)
	case in.Query != "":
		if strings.ContainsAny(in.Query, "&=#?% ") {
			return nil, keyErr("inject.query", "%q is not a plain query parameter name", in.Query)
		}
		j.kind, j.name = injectQuery, in.Query
		j.value, err = parseTemplate("inject.value", name, in.Value)
	default:
		if in.Value != "" {
			return nil, keyErr("inject.value", "not used with basic; set basic.username and basic.password")
		}
		j.kind, j.name = injectBasic, "Authorization"
		if j.user, err = parseTemplate("inject.basic.username", name, in.Basic.Username); err != nil {
			return nil, err
		}
		j.pass, err = parseTemplate("inject.basic.password", name, in.Basic.Password)
	}
	if err != nil {
		return nil, err
	}
	return j, nil
}

// rendered is a credential ready to set on a request.
type rendered struct {
	value Secret // header value or query value
	user  Secret // basic auth
	pass  Secret
	// scrub lists the values to remove from responses: the injected value, its encodings and
	// the parts of the source that went into it.
	scrub []Secret
	// scrubber matches them; compiled once per fetched value, not per request.
	scrubber *scrubber
}

// errEmpty is returned when a template renders to nothing.
var errEmpty = &keyError{msg: "template rendered an empty value"}

// render executes the templates over data. Errors never contain data values: the template
// error text is scrubbed of every string in data.
func (j *injector) render(data map[string]any) (rendered, error) {
	exec := func(t *template.Template) (string, error) {
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return "", &keyError{msg: scrubText(err.Error(), data)}
		}
		s := b.String()
		if strings.TrimSpace(s) == "" {
			return "", errEmpty
		}
		if strings.ContainsAny(s, "\r\n\x00") {
			return "", &keyError{msg: "template rendered a value with a line break or NUL"}
		}
		return s, nil
	}
	var r rendered
	leaves := stringLeaves(data)
	addParts := func(v string) {
		for _, l := range leaves {
			if len(l) >= minScrubLen && strings.Contains(v, l) {
				r.scrub = append(r.scrub, NewSecret(l))
			}
		}
	}
	if j.kind == injectBasic {
		u, err := exec(j.user)
		if err != nil {
			return rendered{}, err
		}
		p, err := exec(j.pass)
		if err != nil {
			return rendered{}, err
		}
		r.user, r.pass = NewSecret(u), NewSecret(p)
		r.scrub = append(r.scrub, NewSecret(p), NewSecret(base64.StdEncoding.EncodeToString([]byte(u+":"+p))))
		addParts(p)
		r.scrubber = newScrubber(r.scrub)
		return r, nil
	}
	v, err := exec(j.value)
	if err != nil {
		return rendered{}, err
	}
	r.value = NewSecret(v)
	r.scrub = append(r.scrub, r.value)
	if j.kind == injectQuery {
		r.scrub = append(r.scrub, NewSecret(queryEscape(v)))
	}
	addParts(v)
	r.scrubber = newScrubber(r.scrub)
	return r, nil
}

// minScrubLen is the shortest source string scrubbed from responses on its own (shorter
// strings in a Vault response, like "read" or "true", are not secrets).
const minScrubLen = 8

// stringLeaves returns every string in a decoded JSON value.
func stringLeaves(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// scrubText removes every string of data (longest first) from s.
func scrubText(s string, data map[string]any) string {
	leaves := stringLeaves(data)
	slices.SortFunc(leaves, func(a, b string) int { return len(b) - len(a) })
	for _, l := range leaves {
		if len(l) >= 3 {
			s = strings.ReplaceAll(s, l, redacted)
		}
	}
	return s
}

// stripAndSet removes what the client sent in the injected place and sets the credential.
func (j *injector) stripAndSet(out *http.Request, r rendered) {
	out.Header.Del("Proxy-Authorization")
	switch j.kind {
	case injectHeader:
		out.Header.Del(j.name)
		out.Header.Set(j.name, r.value.Reveal())
	case injectQuery:
		out.URL.RawQuery = setQuery(out.URL.RawQuery, j.name, r.value.Reveal())
	case injectBasic:
		out.Header.Del("Authorization")
		out.SetBasicAuth(r.user.Reveal(), r.pass.Reveal())
	}
}

// Format implements fmt.Formatter (see entry.Format).
func (rendered) Format(f fmt.State, _ rune) {
	_, _ = f.Write([]byte("secrets.rendered{" + redacted + "}"))
}

// MarshalJSON keeps the value out of JSON.
func (rendered) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
