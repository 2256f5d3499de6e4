package fakeprovider

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// Create: a charge under an idempotency key, with the faults of a real
// provider.

// Script queues faults for the next Create calls for purchaseID, one per
// call in order, after any already queued; NoFault runs a call clean. A
// scripted call ignores the probabilistic draw (which is still consumed).
// Once the queue is empty, calls get probabilistic faults again.
func (f *Fake) Script(purchaseID string, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.chargeFaults.script(purchaseID, faults)
}

// Create implements provider.Provider. It charges unless the key's saved
// response is replayed; the replay is the response as first sent (a
// processing charge replays as Pending even once settled), as in Stripe.
// After a LostReply fault, or when ctx ends while the request is in
// flight, the charge is made but Create returns an unknown-outcome error.
func (f *Fake) Create(ctx context.Context, req provider.CreateRequest) (provider.Result, error) {
	if err := f.admit(ctx, provider.OpCreate); err != nil {
		return provider.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		f.mu.Lock()
		f.calls[provider.OpCreate]++
		f.keyCalls[req.IdempotencyKey]++
		f.mu.Unlock()
		return provider.Result{}, fmt.Errorf("fakeprovider: create for %s: not sent: %w", req.PurchaseID, err)
	}
	a := f.create(req)
	switch {
	case a.fault == FailBefore || a.fault == Timeout || a.fault == LostReply:
		return provider.Result{}, &FaultError{Fault: a.fault, PurchaseID: req.PurchaseID}
	case a.err != nil:
		return provider.Result{}, a.err
	case ctx.Err() != nil: // the caller gave up while the provider acted
		return provider.Result{}, fmt.Errorf("fakeprovider: create for %s: outcome unknown: %w", req.PurchaseID, ctx.Err())
	}
	return a.res, nil
}

// attempt is what one create did, before its reply reaches the caller.
type attempt struct {
	fault Fault // injected into this call
	// res and err are the reply: a result, or a definite error (invalid
	// request, key mismatch). Both are zero when FailBefore or Timeout
	// stopped the call before the provider acted.
	res provider.Result
	err error
	// created reports that this call made a new charge: a result with a
	// payment id and created false is a replay of the key's saved
	// response.
	created bool
}

// create runs one create call up to its reply, leaving the fault for the
// caller to act out: Create turns it into an error, an HTTP front end can
// turn it into transport behaviour (a 429, a dropped connection).
func (f *Fake) create(req provider.CreateRequest) attempt {
	return f.createHashed(req, req.Hash())
}

// createHashed is create with hash standing for the request's parameters
// in the key store, for a front end whose requests carry parameters that
// CreateRequest does not hold (Stripe compares them all).
func (f *Fake) createHashed(req provider.CreateRequest, hash string) attempt {
	key := req.IdempotencyKey
	f.mu.Lock()
	f.calls[provider.OpCreate]++
	f.keyCalls[key]++
	a := attempt{fault: f.chargeFaults.next(req.PurchaseID)}
	if a.fault == FailBefore || a.fault == Timeout {
		f.mu.Unlock()
		return a
	}
	if a.fault == Reject {
		f.mu.Unlock()
		a.err = fmt.Errorf("%w: create for %s: injected reject", ErrInvalidRequest, req.PurchaseID)
		return a
	}
	if err := validate(req); err != nil {
		f.mu.Unlock()
		a.err = err
		return a
	}
	if key != "" { // as in Stripe, a create without a key is never replayed
		if f.inFlight[key] {
			f.mu.Unlock()
			a.res = provider.Result{Outcome: provider.Pending, Reason: ReasonKeyInUse}
			return a
		}
		if s, ok := f.keys[key]; ok {
			switch {
			case f.cfg.Now().Sub(s.at) > f.cfg.KeyRetention:
				delete(f.keys, key) // forgotten: this create charges again
			case s.op != provider.OpCreate || s.hash != hash:
				f.mu.Unlock()
				a.err = fmt.Errorf("fakeprovider: create for %s: key %q: %w", req.PurchaseID, key, provider.ErrIdempotencyMismatch)
				return a
			default:
				f.mu.Unlock()
				a.res = s.res
				return a
			}
		}
		f.inFlight[key] = true
	}
	f.mu.Unlock()

	// The lock is not held while the request is in flight, so that a
	// concurrent create with the same key can see it there.
	if f.cfg.OnAccept != nil {
		f.cfg.OnAccept(req)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	e := f.newCharge(req, a.fault, now)
	a.res = e.result()
	a.created = true
	if key != "" {
		delete(f.inFlight, key)
		f.keys[key] = saved{op: provider.OpCreate, hash: hash, res: a.res, at: now}
	}
	return a
}

// errAmountTooSmall marks a create under the currency's minimum charge,
// which Stripe refuses with amount_too_small before charging.
var errAmountTooSmall = errors.New("amount too small")

func validate(req provider.CreateRequest) error {
	switch {
	case !req.Version.Known():
		return fmt.Errorf("%w: create for %s: request version %d unknown (newest %d)", ErrInvalidRequest, req.PurchaseID, req.Version, provider.CurrentRequestVersion)
	case req.Amount <= 0:
		return fmt.Errorf("%w: create for %s: amount %d must be positive", ErrInvalidRequest, req.PurchaseID, req.Amount)
	case req.Currency == "":
		return fmt.Errorf("%w: create for %s: currency is required", ErrInvalidRequest, req.PurchaseID)
	}
	if least, ok := provider.MinimumCharge(req.Currency); ok && req.Amount < least {
		return fmt.Errorf("%w: create for %s: %w: %s is under the minimum charge of %s", ErrInvalidRequest, req.PurchaseID,
			errAmountTooSmall, provider.FormatAmount(req.Amount, req.Currency), provider.FormatAmount(least, req.Currency))
	}
	return nil
}

// faultSource draws the faults of one kind of call (creates, refund
// creates): one math/rand/v2 source per stream (a purchase, a refund),
// seeded by Config.Seed, the stream's key and the kind's salt, and a queue
// of scripted faults per stream. Its maps are guarded by Fake.mu.
type faultSource struct {
	probs   Faults
	seed    int64
	salt    uint64 // 0 for creates, so that their draws stay as they were
	scripts map[string][]Fault
	rngs    map[string]*rand.Rand
}

func newFaultSource(probs Faults, seed int64, salt uint64) *faultSource {
	return &faultSource{
		probs:   probs,
		seed:    seed,
		salt:    salt,
		scripts: make(map[string][]Fault),
		rngs:    make(map[string]*rand.Rand),
	}
}

// script queues faults for the next calls of stream key. Call with f.mu
// held.
func (s *faultSource) script(key string, faults []Fault) {
	s.scripts[key] = append(s.scripts[key], faults...)
}

// next returns the fault of the next call of stream key. The draw is
// taken even when a script decides, so that the n-th call always uses the
// n-th draw. Call with f.mu held.
func (s *faultSource) next(key string) Fault {
	drawn := NoFault
	if s.probs.any() {
		r := s.rngs[key]
		if r == nil {
			h := fnv.New64a()
			h.Write([]byte(key))
			r = rand.New(rand.NewPCG(uint64(s.seed), h.Sum64()^s.salt))
			s.rngs[key] = r
		}
		drawn = s.probs.pick(r.Float64())
	}
	if q := s.scripts[key]; len(q) > 0 {
		if len(q) == 1 {
			delete(s.scripts, key)
		} else {
			s.scripts[key] = q[1:]
		}
		return q[0]
	}
	return drawn
}

// newCharge records a charge made by req under fault. Call with f.mu held.
func (f *Fake) newCharge(req provider.CreateRequest, fault Fault, now time.Time) *entry {
	f.seq++
	e := &entry{seq: f.seq, Charge: Charge{
		ID:             f.newID("pi_", f.seq),
		PurchaseID:     req.PurchaseID,
		Customer:       req.Customer,
		Amount:         req.Amount,
		Currency:       req.Currency,
		Description:    req.Description,
		PaymentMethod:  req.PaymentMethod,
		IdempotencyKey: req.IdempotencyKey,
		OffSession:     req.OffSession(),
		FinalStatus:    StatusSucceeded,
		Fault:          fault,
		CreatedAt:      now,
	}}
	switch {
	case req.PaymentMethod == PaymentMethodDeclined || fault == Decline || fault == ProcessingDecline:
		e.FinalStatus = StatusRequiresPaymentMethod
		e.DeclineCode = DeclineCode
	case req.PaymentMethod == PaymentMethodAuthenticationRequired && e.OffSession:
		// Nobody can authenticate: a definite decline, as Stripe's.
		e.FinalStatus = StatusRequiresPaymentMethod
		e.DeclineCode = DeclineAuthenticationRequired
	case req.PaymentMethod == PaymentMethodAuthenticationRequired:
		// Waiting for a customer who is not there: it stays so.
		e.FinalStatus = StatusRequiresAction
	}
	e.Status = e.FinalStatus
	if fault == DeclineThenSucceed {
		e.Status, e.FinalStatus, e.DeclineCode = StatusRequiresPaymentMethod, StatusSucceeded, DeclineCode
		e.SettlesAt = now.Add(f.cfg.SettleAfter)
	}
	if fault == Processing || fault == ProcessingDecline {
		e.Status = StatusProcessing
		e.SettlesAt = now.Add(f.cfg.SettleAfter)
	}
	if fault == StaleProcessing {
		e.staleReads = 1
	}
	f.add(e, false)
	return e
}
