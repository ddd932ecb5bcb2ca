package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/trawlhq/trawl/engine"
)

// Where a setting came from, lowest precedence first: a flag given on the
// command line beats the config file, which beats a TRAWL_* variable,
// which beats the default.
const (
	fromDefault = "default"
	fromEnv     = "env"
	fromFile    = "file"
	fromFlag    = "flag"
)

// errConfig marks a config file that cannot be used: unreadable, not
// TOML, an unknown key or a bad value.
var errConfig = errors.New("config file")

// configEnv names the config file when --config is not given.
const configEnv = "TRAWL_CONFIG"

// configKeys is every flag of every command of root: the keys a config
// file may hold.
func configKeys(root *cobra.Command) *pflag.FlagSet {
	keys := pflag.NewFlagSet("keys", pflag.ContinueOnError)
	add := func(f *pflag.Flag) {
		if keys.Lookup(f.Name) == nil && f.Name != "help" && f.Name != "version" {
			keys.AddFlag(f)
		}
	}
	root.PersistentFlags().VisitAll(add)
	for _, c := range root.Commands() {
		c.Flags().VisitAll(add)
	}
	return keys
}

// settle sets the flags of fs that the command line left alone, first from
// the config file (--config, else TRAWL_CONFIG), then from TRAWL_*
// variables, and records where each flag's value came from in o.sources.
// known holds every flag of every command: a key of the file that names
// none of them is an error, one that names a flag of another command is
// ignored, so that one file serves every command of a deployment.
func (o *options) settle(fs *pflag.FlagSet, known *pflag.FlagSet) error {
	o.sources = map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			o.sources[f.Name] = fromFlag
		}
	})
	path := o.configPath
	if f := fs.Lookup("config"); f == nil || !f.Changed {
		path = os.Getenv(configEnv)
	}
	if path != "" {
		o.configPath = path
		if err := applyConfig(fs, known, path, o.sources); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	return bindEnv(fs, o.sources)
}

// applyConfig sets the flags of fs named by the keys of the TOML file at
// path, except those already in sources, and records them there.
func applyConfig(fs, known *pflag.FlagSet, path string, sources map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return fmt.Errorf("%w %s: %w", errConfig, path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var errs []error
	for _, k := range keys {
		if k == "config" || known.Lookup(k) == nil {
			hint := "the keys are the flags' names, as in concurrency = 32"
			if near := nearest(known, k); near != "" {
				hint = "did you mean " + near + "? " + hint
			}
			errs = append(errs, fmt.Errorf("%w %s: unknown key %q (%s)", errConfig, path, k, hint))
			continue
		}
		f := fs.Lookup(k)
		if f == nil || sources[k] != "" {
			continue // another command's flag, or given on the command line
		}
		if err := setFromTOML(f, doc[k]); err != nil {
			errs = append(errs, fmt.Errorf("%w %s: key %q: %w", errConfig, path, k, err))
			continue
		}
		sources[k] = fromFile
	}
	return errors.Join(errs...)
}

// nearest is the flag of fs closest to name, within two edits, or "".
func nearest(fs *pflag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// setFromTOML sets f from a decoded TOML value: a list for a repeatable
// flag (a single string is a list of one), a scalar otherwise.
func setFromTOML(f *pflag.Flag, v any) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var list []string
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				s, ok := e.(string)
				if !ok {
					return fmt.Errorf("want a list of strings, got an element %v", e)
				}
				list = append(list, s)
			}
		case string:
			list = []string{v}
		default:
			return fmt.Errorf("want a list of strings, as in %s = [\"a\", \"b\"]", f.Name)
		}
		return sv.Replace(list)
	}
	switch v.(type) {
	case []any, map[string]any, []map[string]any:
		return fmt.Errorf("want a single value, not a list or a table")
	}
	return f.Value.Set(fmt.Sprint(v))
}

// newConfigCmd prints the effective settings as a config file, each with
// where it came from.
func newConfigCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective settings and where each came from (default, env, file or flag)",
		Long: `Print the effective settings, as a TOML config file that --config reads,
each with where its value came from: default, env (a TRAWL_* variable),
file (the --config file, else TRAWL_CONFIG's) or flag. A flag given on the
command line beats the file, which beats the environment. Passwords in URLs
and the values of credential headers are redacted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.printConfig(o.stdout, cmd.Flags())
		},
	}
	o.addBackendFlags(cmd.Flags())
	o.addCrawlFlags(cmd.Flags())
	return cmd
}

// printConfig writes the flags of fs as TOML, sorted by name, each with
// its source in a comment.
func (o *options) printConfig(w io.Writer, fs *pflag.FlagSet) error {
	if o.configPath != "" {
		fmt.Fprintf(w, "# config file: %s\n", o.configPath)
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" || err != nil {
			return
		}
		src := o.sources[f.Name]
		if src == "" {
			src = fromDefault
		}
		_, err = fmt.Fprintf(w, "%s = %s # %s\n", f.Name, tomlValue(f), src)
	})
	return err
}

// credentialHeaders are the headers whose values trawl config redacts.
var credentialHeaders = []string{"authorization", "proxy-authorization", "cookie"}

// tomlValue is f's value in TOML, redacted.
func tomlValue(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var quoted []string
		for _, s := range sv.GetSlice() {
			if name, _, ok := strings.Cut(s, ":"); ok && f.Name == "header" &&
				slices.Contains(credentialHeaders, strings.ToLower(strings.TrimSpace(name))) {
				s = name + ": xxxxx"
			}
			quoted = append(quoted, strconv.Quote(engine.Redact(s)))
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	switch f.Value.Type() {
	case "bool", "int", "uint", "float64":
		return f.Value.String()
	}
	return strconv.Quote(engine.Redact(f.Value.String()))
}
