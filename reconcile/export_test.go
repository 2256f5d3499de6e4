package reconcile

// SetGroupQueued makes s's group committer call fn, under its lock, with
// the queue's length after every request it queues, so that tests know
// when requests wait together for the next group. nil removes it.
func SetGroupQueued(s *Service, fn func(n int)) {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	s.group.queued = fn
}
