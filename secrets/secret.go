package secrets

import (
	"fmt"
	"log/slog"
)

// redacted is what every rendering of a secret value prints.
const redacted = "[redacted]"

// Secret holds a credential value. Every way of printing it (fmt verbs, slog, JSON, text
// marshalling) yields "[redacted]"; only Reveal returns the value, at the point of use.
type Secret struct{ v string }

// NewSecret wraps v.
func NewSecret(v string) Secret { return Secret{v: v} }

// Reveal returns the value. Call it only where the value leaves the process on purpose.
func (s Secret) Reveal() string { return s.v }

// IsZero reports whether the value is empty.
func (s Secret) IsZero() bool { return s.v == "" }

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return redacted }

// Format implements fmt.Formatter so that no verb (%x, %q, %+v, ...) shows the value.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON implements json.Marshaler.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler (YAML and other text encoders).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

var (
	_ fmt.Stringer   = Secret{}
	_ fmt.Formatter  = Secret{}
	_ slog.LogValuer = Secret{}
)
