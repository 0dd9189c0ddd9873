package approval

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-proxy/airlock/internal/bearer"
)

// ErrClosed is returned by Hold when the service shuts down while a request is held. The
// record stays pending (it survives a restart and can still be decided; an approval then
// lets the client's retry through within the retry window).
var ErrClosed = errors.New("approval service is shutting down")

// Options configure a Service. Nil and zero fields mean the documented default.
type Options struct {
	Config Config
	// Store overrides Config.Store (the Service then does not close it).
	Store Store
	// Logger; nil discards.
	Logger *slog.Logger
	// HTTPClient sends webhooks and external service calls; nil: a client with a 15s timeout.
	HTTPClient *http.Client
	// PollInterval is how often held requests look for decisions made by other replicas
	// sharing the store; 0: 500ms.
	PollInterval time.Duration
	// NotifyAttempts bounds webhook and service deliveries; 0: 6.
	NotifyAttempts int
	// NotifyBackoff is the first delay between attempts, doubled each time up to 30s; 0: 1s.
	NotifyBackoff time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Service holds requests for approval. It implements the proxy's Approver interface and
// serves the admin API (Handler). Create with New, stop with Close.
type Service struct {
	cfg           Config
	store         Store
	ownStore      bool
	log           *slog.Logger
	hc            *http.Client
	poll          time.Duration
	attempts      int
	backoff       time.Duration
	now           func() time.Time
	approvers     *bearer.Set
	approverNames map[string]bool
	serviceToken  secretString
	events        *broker
	pages         *template.Template
	logins        *throttle  // failed sign-ins and bearer tokens, per client address and name
	hooks         *hookLimit // webhooks per sandbox
	newRecords    *hookLimit // new approval records per sandbox

	mu      sync.Mutex
	waiters map[string]chan Record
	// holding counts this Service's pending requests per sandbox and request hash: an
	// identical request already waiting is not announced again.
	holding map[string]int

	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// Service implements the proxy's Approver interface (declared in package proxy).
var _ interface {
	Hold(context.Context, Request) (Result, error)
} = (*Service)(nil)

// New opens the store (unless o.Store is set), reads the approvers' tokens, expires
// records whose time ran out while no airlock was running, and starts the poller.
func New(ctx context.Context, o Options) (*Service, error) {
	cfg := o.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:        cfg,
		log:        o.Logger,
		hc:         o.HTTPClient,
		poll:       o.PollInterval,
		attempts:   o.NotifyAttempts,
		backoff:    o.NotifyBackoff,
		now:        o.Now,
		events:     newBroker(),
		pages:      parsePageTemplates(),
		logins:     newThrottle(loginFailures, loginWindow),
		hooks:      newHookLimit(cfg.WebhookBurst, cfg.WebhookInterval.D()),
		newRecords: newHookLimit(cfg.NewBurst, cfg.NewInterval.D()),
		waiters:    map[string]chan Record{},
		holding:    map[string]int{},
		closing:    make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "approval")
	if s.hc == nil {
		s.hc = &http.Client{Timeout: 15 * time.Second}
	}
	if s.poll <= 0 {
		s.poll = 500 * time.Millisecond
	}
	if s.attempts <= 0 {
		s.attempts = 6
	}
	if s.backoff <= 0 {
		s.backoff = time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	if s.approvers, err = loadApprovers(cfg.Approvers); err != nil {
		return nil, err
	}
	s.approverNames = map[string]bool{}
	for _, a := range cfg.Approvers {
		s.approverNames[a.Name] = true
	}
	if cfg.ServiceTokenFile != "" {
		b, err := os.ReadFile(cfg.ServiceTokenFile)
		if err != nil {
			return nil, fmt.Errorf("approvals.service_token_file: %w", err)
		}
		s.serviceToken = secretString(strings.TrimSpace(string(b)))
	}
	s.store = o.Store
	if s.store == nil {
		if cfg.Store == "" {
			return nil, errors.New("approvals.store: required (see approval.DefaultStore)")
		}
		if s.store, err = OpenStore(ctx, cfg.Store); err != nil {
			return nil, err
		}
		s.ownStore = true
	}
	if n, err := s.store.ExpireDue(ctx, s.now()); err != nil {
		s.closeStore()
		return nil, err
	} else if n > 0 {
		s.log.Info("expired approvals whose time ran out", "count", n)
	}
	s.prune(ctx, s.now())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.pollLoop()
	return s, nil
}

// Store returns the store the service uses.
func (s *Service) Store() Store { return s.store }

// Config returns the effective configuration (defaults filled in).
func (s *Service) Config() Config { return s.cfg }

// MaxBody is the largest body the proxy should buffer before calling Hold.
func (s *Service) MaxBody() int64 { return int64(s.cfg.MaxBody) }

// Close releases held requests with ErrClosed, stops notifications and the poller, and
// closes the store it opened. Pending records stay pending.
func (s *Service) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closing)
		s.cancel()
		s.wg.Wait()
		s.events.close()
		err = s.closeStore()
	})
	return err
}

func (s *Service) closeStore() error {
	if !s.ownStore {
		return nil
	}
	if err := s.store.Close(); err != nil {
		return fmt.Errorf("close approval store: %w", err)
	}
	return nil
}

// Decide ends a pending record as approver `by`: StateApproved, StateDenied, or
// StateCancelled (withdrawn without a judgement). A record that is no longer pending gives
// ErrDecided with its current form.
func (s *Service) Decide(ctx context.Context, id string, state State, by, comment string) (Record, error) {
	if !state.ByApprover() {
		return Record{}, fmt.Errorf("decide approval %s: state must be approved, denied or cancelled, got %q", id, state)
	}
	if by == "" {
		return Record{}, fmt.Errorf("decide approval %s: no approver name", id)
	}
	return s.end(ctx, id, Decision{State: state, By: by, Comment: comment, At: s.now()})
}

// end records a decision and tells the local waiter and the event stream.
func (s *Service) end(ctx context.Context, id string, d Decision) (Record, error) {
	r, err := s.store.Decide(ctx, id, d)
	if err != nil {
		return r, err
	}
	s.log.Info("approval decided", "id", id, "state", r.State, "decided_by", r.DecidedBy)
	s.deliver(r)
	s.events.publish(Event{Type: EventDecided, Record: r})
	return r, nil
}

// Get returns one record.
func (s *Service) Get(ctx context.Context, id string) (Record, error) { return s.store.Get(ctx, id) }

// List returns records, newest first.
func (s *Service) List(ctx context.Context, f ListFilter) ([]Record, error) {
	return s.store.List(ctx, f)
}

// Subscribe streams new approvals and decisions seen by this Service until cancel is
// called or the Service closes (then the channel is closed). A subscriber that falls far
// behind is dropped (its channel is closed).
func (s *Service) Subscribe() (<-chan Event, func()) { return s.events.subscribe() }

// register makes rec's waiter; duplicate reports that an identical request from the same
// sandbox is already waiting here.
func (s *Service) register(rec Record) (ch chan Record, duplicate bool) {
	ch = make(chan Record, 1)
	key := rec.Sandbox + "\x00" + rec.RequestSHA256
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters[rec.ID] = ch
	duplicate = s.holding[key] > 0
	s.holding[key]++
	return ch, duplicate
}

func (s *Service) unregister(rec Record) {
	key := rec.Sandbox + "\x00" + rec.RequestSHA256
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters, rec.ID)
	if s.holding[key]--; s.holding[key] <= 0 {
		delete(s.holding, key)
	}
}

// deliver hands a decided record to its local waiter, if any; duplicates are dropped.
func (s *Service) deliver(r Record) {
	s.mu.Lock()
	ch := s.waiters[r.ID]
	s.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- r:
	default:
	}
}

// pollLoop finds decisions made through other replicas and expires stale records.
func (s *Service) pollLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.poll)
	defer t.Stop()
	lastSweep := s.now()
	lastPrune := time.Time{}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		ids := make([]string, 0, len(s.waiters))
		for id := range s.waiters {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		for len(ids) > 0 {
			n := min(len(ids), 200)
			recs, err := s.store.Decided(s.ctx, ids[:n])
			if err != nil && s.ctx.Err() == nil {
				s.log.Warn("poll approval store", "err", err)
			}
			for _, r := range recs {
				s.deliver(r)
			}
			ids = ids[n:]
		}
		if now := s.now(); now.Sub(lastSweep) >= 10*time.Second {
			lastSweep = now
			if _, err := s.store.ExpireDue(s.ctx, now); err != nil && s.ctx.Err() == nil {
				s.log.Warn("expire approvals", "err", err)
			}
			if now.Sub(lastPrune) >= pruneEvery {
				lastPrune = now
				s.prune(s.ctx, now)
			}
		}
	}
}

// pruneEvery is how often ended records past approvals.retention are deleted.
const pruneEvery = 10 * time.Minute

// prune deletes the ended records older than the retention (none when it is negative).
func (s *Service) prune(ctx context.Context, now time.Time) {
	if s.cfg.Retention < 0 {
		return
	}
	n, err := s.store.Prune(ctx, now.Add(-s.cfg.Retention.D()))
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("prune approvals", "err", err)
		}
		return
	}
	if n > 0 {
		s.log.Info("deleted ended approvals past the retention", "count", n, "retention", s.cfg.Retention)
	}
}
