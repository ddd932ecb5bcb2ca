package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version describes the binary from its build information: the module
// version, the commit and whether the tree was modified, the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
		if at != "" {
			v += " " + at
		}
	}
	return v + " " + bi.GoVersion
}

func newVersionCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print trawl's version (also --version)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(o.stdout, "trawl %s\n", version())
			return nil
		},
	}
}
