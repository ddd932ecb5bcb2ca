//go:build !unix

package nats

import (
	"fmt"
	"os"
)

// lockDir opens the file path. Without flock, two servers on one data
// directory are not detected on this platform.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	return f, nil
}
