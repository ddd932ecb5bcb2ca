// Package trawlbin builds the trawl binary for the tests and benchmarks
// that run it as a process (cmd/trawl's tests, internal/integration/crawl,
// internal/benchcrawl), and runs the tests of such a package (TestMain).
package trawlbin

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// pkg is the command Build builds.
const pkg = "github.com/trawlhq/trawl/cmd/trawl"

// Build builds the trawl command into dir/trawl, with the race detector
// if race, and returns the binary's path. It runs the go command of PATH,
// which finds the module from the working directory: call it from inside
// the module.
func Build(ctx context.Context, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "trawl")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %v (run from inside the trawl module): %w\n%s", args, err, out)
	}
	return bin, nil
}

// Config says how TestMain runs a package's tests.
type Config struct {
	// Parallel is how many parallel tests run at once unless -parallel
	// says otherwise (its default is the number of CPUs): tests that drive
	// trawl processes and servers mostly wait on them. 0 leaves it.
	Parallel int
	// Race builds trawl with the race detector.
	Race bool
	// Run runs the tests and returns the exit code, as
	// integration.Run does for a package that starts servers. nil: m.Run,
	// then, if it passed, a check that no goroutine outlived the tests
	// (go.uber.org/goleak).
	Run func(*testing.M) int
}

// TestMain is the TestMain of a package whose tests run trawl as a
// process: it builds trawl into a temporary directory, sets *bin to its
// path, runs the tests as cfg says, removes the directory and exits with
// the tests' code.
//
//	func TestMain(m *testing.M) { trawlbin.TestMain(m, &trawlBin, trawlbin.Config{Parallel: 4}) }
func TestMain(m *testing.M, bin *string, cfg Config) {
	os.Exit(testMain(m, bin, cfg))
}

func testMain(m *testing.M, bin *string, cfg Config) int {
	if cfg.Parallel > 0 {
		setParallel(cfg.Parallel)
	}
	dir, err := os.MkdirTemp("", "trawl-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "trawlbin: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(context.Background(), dir, cfg.Race); err != nil {
		fmt.Fprintf(os.Stderr, "trawlbin: %v\n", err)
		return 1
	}
	if cfg.Run != nil {
		return cfg.Run(m)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "trawlbin: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// setParallel makes -parallel default to n in this test binary alone; a
// -parallel given on the command line wins.
func setParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
