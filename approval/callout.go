package approval

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// methodOverrideNames are headers and parameters that frameworks read as "treat this request
// as method X" (Rails and Laravel `_method`, Google and Microsoft `X-HTTP-Method-Override`,
// OData `X-HTTP-Method`, Express method-override `X-Method-Override`). Lower case.
var methodOverrideNames = [...]string{"_method", "x-http-method-override", "x-http-method", "x-method-override"}

// routingHeaders are read by gateways and frameworks to decide where a request goes, who
// sent it or which path it is for, beyond the request line. Canonical form.
var routingHeaders = [...]string{"Forwarded", "X-Host", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip",
	"X-Originating-Ip", "X-Remote-Addr", "X-Remote-Ip", "X-Rewrite-Url", "X-Http-Destinationurl",
	"X-Envoy-Original-Path", "Destination"}

// singletonHeaders mean one thing only once: with several values, servers disagree which counts.
var singletonHeaders = [...]string{"Content-Type", "Content-Encoding", "Content-Language", "Range", "Origin"}

const (
	maxWarnings     = 32
	maxWarningValue = 200 // bytes of a value quoted in a warning (the record has it whole)
	maxFormParts    = 1000
)

// Warnings lists what in a request changes its meaning at the upstream beyond its method and
// URL, for approvers to see at a glance: method overrides (headers, query parameters, form
// and JSON body fields), routing and client-address headers, repeated single-valued headers,
// an encoded body (the preview shows encoded bytes) and a protocol upgrade. rawURL is the URL
// as sent; h the forwarded headers; body the exact bytes. Untrusted input: never fails.
func Warnings(method, rawURL string, h http.Header, body []byte) []string {
	var out []string
	add := func(s string) {
		if len(out) < maxWarnings {
			out = append(out, s)
		}
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := h[k]
		ck := http.CanonicalHeaderKey(k)
		switch {
		case isOverrideName(k):
			for _, v := range vs {
				add("method override: header " + k + ": " + quoted(v) + " — the upstream may act on this " + method + " as " + quoted(strings.ToUpper(strings.TrimSpace(v))))
			}
		case slices.Contains(routingHeaders[:], ck) || strings.HasPrefix(ck, "X-Forwarded-") || strings.HasPrefix(ck, "X-Original-"):
			add("routing header " + k + ": " + quoted(strings.Join(vs, ", ")) + " — gateways and frameworks may route, authorise or log by it")
		case ck == "Content-Encoding" && len(vs) > 0:
			add("encoded body: Content-Encoding " + quoted(strings.Join(vs, ", ")) + " — the upstream decodes the body; the preview shows the encoded bytes")
		case ck == "Upgrade":
			add("protocol upgrade: Upgrade " + quoted(strings.Join(vs, ", ")) + " — once approved the connection may become a two-way stream that this approval does not inspect")
		}
		if len(vs) > 1 && slices.Contains(singletonHeaders[:], ck) {
			add("repeated header " + k + " (" + strconv.Itoa(len(vs)) + " values) — servers disagree about which one counts")
		}
		if ck != k {
			add("header name " + quoted(k) + " is not in canonical form — upstreams may not treat it as " + ck)
		}
	}
	if u, err := url.Parse(rawURL); err == nil && u.RawQuery != "" {
		for _, p := range strings.Split(u.RawQuery, "&") {
			name, value, _ := strings.Cut(p, "=")
			if n, err := url.QueryUnescape(name); err == nil {
				name = n
			}
			if v, err := url.QueryUnescape(value); err == nil {
				value = v
			}
			if isOverrideName(name) {
				add("method override: query parameter " + quoted(name) + "=" + quoted(value) + " — the upstream may act on this " + method + " as " + quoted(strings.ToUpper(value)))
			}
		}
	}
	for _, f := range bodyOverrides(h.Get("Content-Type"), body) {
		add("method override: body field " + quoted(f[0]) + "=" + quoted(f[1]) + " — the upstream may act on this " + method + " as " + quoted(strings.ToUpper(f[1])))
	}
	return out
}

func isOverrideName(name string) bool {
	return slices.Contains(methodOverrideNames[:], strings.ToLower(strings.TrimSpace(name)))
}

// quoted shows a sandbox-chosen value in Go syntax (control characters visible), cut short.
func quoted(s string) string {
	if len(s) > maxWarningValue {
		return strconv.Quote(strings.ToValidUTF8(s[:maxWarningValue], "\uFFFD")) + "…"
	}
	return strconv.Quote(s)
}

// bodyOverrides finds method-override fields in a form, multipart or JSON body.
func bodyOverrides(contentType string, body []byte) [][2]string {
	if len(body) == 0 {
		return nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil
	}
	var out [][2]string
	switch {
	case mt == "application/x-www-form-urlencoded":
		for _, p := range bytes.Split(body, []byte("&")) {
			name, value, _ := strings.Cut(string(p), "=")
			if n, err := url.QueryUnescape(name); err == nil {
				name = n
			}
			if v, err := url.QueryUnescape(value); err == nil {
				value = v
			}
			if isOverrideName(name) {
				out = append(out, [2]string{name, value})
			}
		}
	case mt == "multipart/form-data" && params["boundary"] != "":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for i := 0; i < maxFormParts; i++ {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			if isOverrideName(p.FormName()) {
				v, _ := io.ReadAll(io.LimitReader(p, maxWarningValue+1))
				out = append(out, [2]string{p.FormName(), string(v)})
			}
		}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil {
			return nil
		}
		for k, raw := range top {
			if !isOverrideName(k) {
				continue
			}
			var v string
			if json.Unmarshal(raw, &v) != nil {
				v = string(raw)
			}
			out = append(out, [2]string{k, v})
		}
		slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	}
	return out
}
