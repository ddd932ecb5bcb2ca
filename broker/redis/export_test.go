package redis

// WaitingAsks is how many Acquire calls of l wait to be sent.
func WaitingAsks(l *HostLimiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.asks)
}
