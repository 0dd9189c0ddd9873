package approval

import "sync"

// Event types on the stream.
const (
	EventCreated = "created" // a new record (pending, or approved at once by a retry grant)
	EventDecided = "decided" // a record was approved, denied, expired or cancelled
)

// Event is one message of the approvals stream.
type Event struct {
	Type   string `json:"type"`
	Record Record `json:"approval"`
}

// subscriberBuffer is how many events a subscriber may fall behind before it is dropped.
const subscriberBuffer = 64

// broker fans events out to subscribers without ever blocking the publisher.
type broker struct {
	mu     sync.Mutex
	subs   map[chan Event]struct{}
	closed bool
}

func newBroker() *broker { return &broker{subs: map[chan Event]struct{}{}} }

func (b *broker) subscribe() (<-chan Event, func()) {
	ch := make(chan Event, subscriberBuffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(ch)
		return ch, func() {}
	}
	b.subs[ch] = struct{}{}
	return ch, func() { b.drop(ch) }
}

func (b *broker) drop(ch chan Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

func (b *broker) publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- e:
		default: // too slow: drop it rather than hold up a request
			delete(b.subs, ch)
			close(ch)
		}
	}
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
}
