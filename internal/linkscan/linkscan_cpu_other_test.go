//go:build !unix

package linkscan

// processCPU is not measured here.
func processCPU() int64 { return 0 }
