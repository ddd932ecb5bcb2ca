package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the binary if a goroutine outlives the tests: every
// goroutine the engine starts has an owner that waits for it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
