package audit

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Recorder is where a RefusalLimit writes (a *Sink).
type Recorder interface {
	Record(ctx context.Context, ev *Event) error
}

// Defaults of RefusalLimitOptions.
const (
	DefaultRefusalBurst    = 100
	DefaultRefusalInterval = time.Second
	DefaultRefusalSummary  = time.Minute
)

// RefusalLimitOptions configure a RefusalLimit; zero fields mean the defaults.
type RefusalLimitOptions struct {
	// Burst refusal records per sandbox are written one by one at once, then one per
	// Interval; the rest are counted and written as summaries.
	Burst    int
	Interval time.Duration
	// Summary is how often the counts are written, one record per sandbox, rule and
	// decision that had any (and at Close).
	Summary time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// RefusalLimit keeps a sandbox that sends refused requests without end from growing the
// audit log without bound. Records of refusals (a request or CONNECT denied or failed before
// anything was forwarded: no stage, decision deny or error, no approval) are written one by
// one within a per-sandbox token bucket; past it they are counted per sandbox, rule and
// decision and written as one event.KindRefusalsSuppressed record per Summary period
// (Suppressed says how many, Time and DurationMS the span in which they happened). Every
// other record (decision and completion records of forwarded requests, approvals, lifecycle
// events) is passed on as is, one per request, whatever the rate.
type RefusalLimit struct {
	next Recorder
	o    RefusalLimitOptions

	mu      sync.Mutex
	buckets map[string]*refusalBucket
	counts  map[suppressKey]*suppressed

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type refusalBucket struct {
	tokens float64
	last   time.Time
}

type suppressKey struct {
	sandbox, rule string
	decision      event.Decision
}

type suppressed struct {
	n           int64
	first, last time.Time
	labels      map[string]string
	status      int
	errorClass  string
}

// maxRefusalKeys bounds each table. Past it, buckets that are full again are dropped and, if
// still full, further sandboxes share one bucket and one count ("" sandbox, rule "*").
const maxRefusalKeys = 10000

// NewRefusalLimit returns a RefusalLimit writing to next and starts its summary timer; Close
// it (before next) to write the last counts.
func NewRefusalLimit(next Recorder, o RefusalLimitOptions) *RefusalLimit {
	if o.Burst <= 0 {
		o.Burst = DefaultRefusalBurst
	}
	if o.Interval <= 0 {
		o.Interval = DefaultRefusalInterval
	}
	if o.Summary <= 0 {
		o.Summary = DefaultRefusalSummary
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &RefusalLimit{next: next, o: o, buckets: map[string]*refusalBucket{},
		counts: map[suppressKey]*suppressed{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

// IsRefusal reports whether ev is a refusal record that RefusalLimit may summarise.
func IsRefusal(ev *Event) bool {
	return ev.Stage == "" && (ev.Kind == event.KindRequest || ev.Kind == event.KindConnect) &&
		ev.Decision.Refused() && ev.ApprovalID == ""
}

// Record writes ev, or counts it when it is a refusal past its sandbox's limit (then the
// error is nil: its count is written with the next summary).
func (l *RefusalLimit) Record(ctx context.Context, ev *Event) error {
	if !IsRefusal(ev) || l.admit(ev) {
		return l.next.Record(ctx, ev)
	}
	return nil
}

func (l *RefusalLimit) admit(ev *Event) bool {
	now := l.o.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	sandbox := ev.SandboxID
	b := l.buckets[sandbox]
	if b == nil {
		if len(l.buckets) >= maxRefusalKeys {
			l.pruneBuckets(now)
		}
		if len(l.buckets) >= maxRefusalKeys {
			sandbox = ""
			b = l.buckets[sandbox]
		}
		if b == nil {
			b = &refusalBucket{tokens: float64(l.o.Burst), last: now}
			l.buckets[sandbox] = b
		}
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(float64(l.o.Burst), b.tokens+float64(el)/float64(l.o.Interval))
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	k := suppressKey{ev.SandboxID, ev.Rule, ev.Decision}
	c := l.counts[k]
	if c == nil && len(l.counts) >= maxRefusalKeys {
		k = suppressKey{"", "*", event.DecisionDeny}
		c = l.counts[k]
	}
	if c == nil {
		c = &suppressed{first: now}
		l.counts[k] = c
	}
	c.n++
	c.last = now
	c.labels, c.status, c.errorClass = maps.Clone(ev.Labels), ev.Status, ev.ErrorClass
	return false
}

func (l *RefusalLimit) pruneBuckets(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+float64(now.Sub(b.last))/float64(l.o.Interval) >= float64(l.o.Burst) {
			delete(l.buckets, k)
		}
	}
}

func (l *RefusalLimit) loop() {
	defer close(l.done)
	t := time.NewTicker(l.o.Summary)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			_ = l.Flush(context.Background())
		}
	}
}

// Flush writes the summaries of everything counted so far. Counts whose record could not be
// written are kept for the next flush; the first error is returned.
func (l *RefusalLimit) Flush(ctx context.Context) error {
	l.mu.Lock()
	counts := l.counts
	l.counts = map[suppressKey]*suppressed{}
	l.mu.Unlock()
	var first error
	for k, c := range counts {
		sum := l.summary(k, c)
		if err := l.next.Record(ctx, &sum); err != nil {
			if first == nil {
				first = err
			}
			l.mu.Lock()
			if cur := l.counts[k]; cur != nil {
				cur.n += c.n
				cur.first = c.first
			} else {
				l.counts[k] = c
			}
			l.mu.Unlock()
		}
	}
	return first
}

func (l *RefusalLimit) summary(k suppressKey, c *suppressed) Event {
	who := k.sandbox
	if who == "" {
		who = "(many sandboxes: the limiter's table was full)"
	}
	return Event{
		Time: c.first.UTC(), Kind: event.KindRefusalsSuppressed, SandboxID: k.sandbox, Labels: c.labels,
		Decision: k.decision, Rule: k.rule, Status: c.status, ErrorClass: c.errorClass, Suppressed: c.n,
		DurationMS: float64(c.last.Sub(c.first).Microseconds()) / 1000,
		Reason: fmt.Sprintf("%d refusals suppressed for sandbox %s, rule %s, between %s and %s: past audit.refusal_burst (%d), then one per audit.refusal_interval (%s)",
			c.n, who, k.rule, c.first.UTC().Format(time.RFC3339), c.last.UTC().Format(time.RFC3339), l.o.Burst, l.o.Interval),
	}
}

// Close stops the summary timer and writes the last summaries. It does not close the
// Recorder it writes to.
func (l *RefusalLimit) Close() error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		err = l.Flush(context.Background())
	})
	return err
}
