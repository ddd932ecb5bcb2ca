package redis

// WaitingAsks is how many hosts' lease asks of l wait to be sent.
func WaitingAsks(l *HostLimiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.asks)
}

// Waiting is how many Acquire calls of l wait for host.
func Waiting(l *HostLimiter, host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.hosts[host]; h != nil {
		return h.waiters
	}
	return 0
}

// FailedReleases is how many lease releases of l failed and wait for the
// keeper's retry.
func FailedReleases(l *HostLimiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, h := range l.hosts {
		if h.owed {
			n++
		}
	}
	return n
}
