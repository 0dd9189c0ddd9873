package secrets

import (
	"net/url"
	"strings"
)

func queryEscape(s string) string { return url.QueryEscape(s) }

// setQuery removes every parameter called name from raw (whatever the client sent, in any
// encoding of the name) and appends name=value, keeping the other parameters as they were.
func setQuery(raw, name, value string) string {
	var kept []string
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, _, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name || k == name {
			continue
		}
		kept = append(kept, part)
	}
	kept = append(kept, url.QueryEscape(name)+"="+url.QueryEscape(value))
	return strings.Join(kept, "&")
}
