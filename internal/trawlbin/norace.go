//go:build !race

package trawlbin

// RaceEnabled tells whether this binary was built with the race detector.
const RaceEnabled = false
