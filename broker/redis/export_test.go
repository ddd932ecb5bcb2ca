package redis

import "github.com/trawlhq/trawl/broker"

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

// LoopWakes is how many times the loops of cons, a consumer of this
// package, were woken to look at the read-ahead again (by room, or to
// steal).
func LoopWakes(cons broker.Consumer) int64 {
	return cons.(*consumer).wakes.Load()
}

// WaitingRobots is how many Robots calls of l wait for the reader's next
// read.
func WaitingRobots(l *HostLimiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.robots)
}
