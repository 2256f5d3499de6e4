package fakeprovider

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"time"
)

// Delivering webhook events: queued copies, attempts with backoff, and
// the loops that drive them.

// release queues ev's copies, then its followers. Call with w.mu held.
func (w *webhooks) release(ev *event) {
	for n := 1; n <= ev.copies; n++ {
		w.seq++
		w.queue = append(w.queue, &outCopy{ev: ev, n: n, seq: w.seq})
	}
	followers := ev.followers
	ev.followers = nil
	for _, f := range followers {
		w.release(f)
	}
}

// next takes the copy to deliver first, if one is due at now; otherwise it
// returns how long until one is, or -1 if none is queued. Call with w.mu
// held.
func (w *webhooks) next(now time.Time) (*outCopy, time.Duration) {
	best := -1
	for i, c := range w.queue {
		if best < 0 || c.due.Before(w.queue[best].due) || (c.due.Equal(w.queue[best].due) && c.seq < w.queue[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return nil, -1
	}
	c := w.queue[best]
	if wait := c.due.Sub(now); !c.due.IsZero() && wait > 0 {
		return nil, wait
	}
	w.queue = slices.Delete(w.queue, best, best+1)
	w.inflight++
	return c, 0
}

// maxAnswer bounds how much of a receiver's answer is read.
const maxAnswer = 64 << 10

// attempt POSTs c once and records the result: acked, rescheduled after
// its backoff, or given up.
func (w *webhooks) attempt(c *outCopy) {
	s := w.s
	c.attempts++
	header := SignatureHeader(c.ev.Payload, s.cfg.WebhookSecret, s.now())
	d := Delivery{EventID: c.ev.ID, Type: c.ev.Type, PaymentID: c.ev.PaymentID, RefundID: c.ev.RefundID, DisputeID: c.ev.DisputeID, Copy: c.n, Attempt: c.attempts, Signature: header}
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(c.ev.Payload))
	if err == nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Stripe-Signature", header)
		req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		var resp *http.Response
		resp, err = s.cfg.WebhookClient.Do(req)
		if err == nil {
			d.StatusCode = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
			resp.Body.Close()
		}
	}
	if err != nil {
		d.Err = err.Error()
	}
	d.Acked = err == nil && d.StatusCode >= 200 && d.StatusCode < 300

	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	w.stats.Sent++
	if c.attempts > 1 {
		w.stats.Retries++
	}
	attrs := []any{"event", d.EventID, "type", d.Type, "payment_intent", d.PaymentID, "refund", d.RefundID, "dispute", d.DisputeID, "copy", d.Copy, "attempt", d.Attempt, "status", d.StatusCode, "error", d.Err}
	switch {
	case d.Acked:
		w.stats.Acked++
		w.pending--
	case s.closed():
		// Abandoned: it stays pending.
		s.log.Warn("fakeprovider: webhook delivery abandoned at close", attrs...)
	case c.attempts >= s.cfg.WebhookMaxAttempts:
		d.GaveUp = true
		w.stats.Failed++
		w.pending--
		s.log.Error("fakeprovider: webhook delivery failed, giving up", attrs...)
	default:
		c.due = time.Now().Add(w.backoff(c.attempts))
		w.queue = append(w.queue, c)
		s.log.Info("fakeprovider: webhook delivery failed, will retry", attrs...)
	}
	w.deliveries = append(w.deliveries, d)
	close(w.changed)
	w.changed = make(chan struct{})
}

// backoff is the wait after a copy's attempts-th failed attempt.
func (w *webhooks) backoff(attempts int) time.Duration {
	d, limit := w.s.cfg.WebhookBackoff, w.s.cfg.WebhookMaxBackoff
	for i := 1; i < attempts && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// drainSync delivers everything queued, waiting out retries' backoffs,
// unless another goroutine is delivering (it then delivers these too).
func (w *webhooks) drainSync() {
	if !w.deliverMu.TryLock() {
		return
	}
	defer w.deliverMu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !w.s.closed() {
		w.mu.Lock()
		c, wait := w.next(time.Now())
		w.mu.Unlock()
		switch {
		case c != nil:
			w.attempt(c)
			continue
		case wait < 0:
			return
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-w.s.closing:
		}
	}
}

// deliverLoop delivers in the background until Close.
func (s *Server) deliverLoop() {
	defer s.wg.Done()
	w := s.wh
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !s.closed() {
		w.mu.Lock()
		c, wait := w.next(time.Now())
		w.mu.Unlock()
		if c != nil {
			w.attempt(c)
			continue
		}
		var due <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-s.closing:
		case <-w.wake:
		case <-due:
		}
		timer.Stop()
	}
}

// tickLoop calls Tick every TickEvery until Close.
func (s *Server) tickLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.TickEvery)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.Tick()
		}
	}
}
