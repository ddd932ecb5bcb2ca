//go:build !race

package linkscan

// raceEnabled: the race detector drops some of a sync.Pool's Puts.
const raceEnabled = false
