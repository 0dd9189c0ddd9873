package audit

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"sync"
)

// NewID returns a random 128-bit identifier in hex, as used for event and request ids.
func NewID() string {
	var b [16]byte
	randomID(&b)
	return hexString(b[:])
}

// randomID fills id with random bytes from a ChaCha8 generator (math/rand/v2's
// cryptographically strong one) seeded from crypto/rand. Ids are drawn twice for every
// forwarded request; a crypto/rand read each time was a sixth of a record's encoding.
func randomID(id *[16]byte) {
	g := idSources.Get().(*mrand.ChaCha8)
	_, _ = g.Read(id[:])
	idSources.Put(g)
}

// idSources are the generators randomID draws from, one per goroutine drawing at once.
var idSources = sync.Pool{New: func() any {
	var seed [32]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read does not fail (it crashes the program instead)
	return mrand.NewChaCha8(seed)
}}
