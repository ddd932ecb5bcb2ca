package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/trawlhq/trawl/broker"
)

// Names of the settings, as trawl's flags name them. Config.Adopt lists
// some of them; a SettingConflict names one.
const (
	SettingAllowDomain  = "allow-domain"
	SettingAllowPrivate = "allow-private"
	SettingInclude      = "include"
	SettingExclude      = "exclude"
	SettingMaxDepth     = "max-depth"
	SettingExtract      = "extract"
	SettingIgnoreRobots = "ignore-robots"
	SettingMaxLinks     = "max-links"
	SettingQueryValues  = "max-query-values"
	SettingHostPages    = "max-pages-per-host"
	SettingPartitions   = "partitions"
	SettingPartitionBy  = "partition-by"
)

// SettingNames lists every setting a worker may adopt or insist on, in
// the order conflicts are reported. Trusted hosts are not among them:
// they are merged (see Settings.TrustedHosts).
var SettingNames = []string{SettingAllowDomain, SettingAllowPrivate, SettingInclude, SettingExclude,
	SettingMaxDepth, SettingExtract, SettingIgnoreRobots, SettingMaxLinks, SettingQueryValues, SettingHostPages,
	SettingPartitions, SettingPartitionBy}

// FixedSettings are the settings that OverrideSettings cannot change: the
// crawl's queued requests sit in the partitions they decide (trawl
// repartition moves them).
var FixedSettings = []string{SettingPartitions, SettingPartitionBy}

// SettingsVersion is the version of the encoding Settings.Encode writes.
// DecodeSettings refuses a later one: a worker never crawls by settings
// it cannot read whole. Settings of one partition keyed by host are
// written as version 1, which versions before partitions read, and the
// others as version 2, which they refuse.
const SettingsVersion = 2

// settingsKey is the Metadata key of a crawl's settings.
const settingsKey = "settings"

// Errors of the crawl's settings.
var (
	// ErrSettingsConflict is returned by JoinSettings (and Crawler.Seed
	// and Run) when a worker insists on a setting the crawl has with
	// another value. It comes as a *SettingsError.
	ErrSettingsConflict = errors.New("settings conflict with the crawl's")
	// ErrSettingsVersion is returned for settings stored in an encoding
	// this version cannot read.
	ErrSettingsVersion = errors.New("crawl settings stored by a newer version")
)

// Settings are the settings that decide what a page yields: which links
// are followed, which addresses may be fetched, what an item holds. They
// belong to the crawl, not to a worker: the first to seed or join a crawl
// stores them with it (broker.Metadata), and every worker that joins
// later adopts them, so that two workers never treat the same page
// differently. The other fields of Config (concurrency, retries, timeouts,
// the sink) are each worker's own.
type Settings struct {
	// AllowedDomains as Config.AllowedDomains: lower case, sorted.
	AllowedDomains []string `json:"allow_domains,omitempty"`
	// AllowPrivate as FetchConfig.AllowPrivate.
	AllowPrivate bool `json:"allow_private,omitempty"`
	// TrustedHosts as Config.TrustedHosts, sorted: the addresses of the
	// start URLs operators gave. A worker's own are added to the crawl's
	// (a crawl seeded again with more start URLs trusts them too); they
	// never conflict.
	TrustedHosts []string `json:"trusted_hosts,omitempty"`
	// Include and Exclude as Config.Include and Exclude, sorted.
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
	// MaxDepth as compiled from Config.MaxDepth: positive, or -1 for
	// unlimited.
	MaxDepth int `json:"max_depth"`
	// Extract as Config.Extract.
	Extract map[string]string `json:"extract,omitempty"`
	// IgnoreRobots as Config.IgnoreRobots.
	IgnoreRobots bool `json:"ignore_robots,omitempty"`
	// MaxLinks as compiled from Config.MaxLinks: positive.
	MaxLinks int `json:"max_links,omitempty"`
	// MaxQueryValues as compiled from Config.MaxQueryValues: positive, or
	// -1 for no guard.
	MaxQueryValues int `json:"max_query_values,omitempty"`
	// MaxPagesPerHost as Config.MaxPagesPerHost: 0 for unlimited.
	MaxPagesPerHost int `json:"max_pages_per_host,omitempty"`
	// Partitions as Config.Partitions: at least 1.
	Partitions int `json:"partitions,omitempty"`
	// PartitionBy as Config.PartitionBy.
	PartitionBy broker.PartitionBy `json:"partition_by,omitempty"`
}

// normalize gives the guards of s their defaults where they are 0 (as in
// settings stored before they existed).
func (s *Settings) normalize() {
	if s.MaxLinks <= 0 {
		s.MaxLinks = DefaultMaxLinks
	}
	switch {
	case s.MaxQueryValues == 0:
		s.MaxQueryValues = DefaultMaxQueryValues
	case s.MaxQueryValues < 0:
		s.MaxQueryValues = -1
	}
	s.MaxPagesPerHost = max(s.MaxPagesPerHost, 0)
	s.Partitions = max(s.Partitions, 1)
}

// SettingsOf returns the settings of cfg, normalised so that equal
// settings compare equal.
func SettingsOf(cfg Config) Settings {
	s := Settings{
		AllowPrivate: cfg.Fetch.AllowPrivate,
		TrustedHosts: sortedSet(cfg.TrustedHosts),
		Include:      sortedSet(cfg.Include),
		Exclude:      sortedSet(cfg.Exclude),
		MaxDepth:     cfg.MaxDepth,
		IgnoreRobots: cfg.IgnoreRobots,

		MaxLinks:        cfg.MaxLinks,
		MaxQueryValues:  cfg.MaxQueryValues,
		MaxPagesPerHost: cfg.MaxPagesPerHost,
		Partitions:      cfg.Partitions,
		PartitionBy:     cfg.PartitionBy,
	}
	s.normalize()
	for _, d := range cfg.AllowedDomains {
		s.AllowedDomains = append(s.AllowedDomains, strings.ToLower(strings.TrimPrefix(d, ".")))
	}
	s.AllowedDomains = sortedSet(s.AllowedDomains)
	switch {
	case s.MaxDepth == 0:
		s.MaxDepth = DefaultMaxDepth
	case s.MaxDepth < 0:
		s.MaxDepth = -1
	}
	if len(cfg.Extract) > 0 {
		s.Extract = maps.Clone(cfg.Extract)
	}
	return s
}

func sortedSet(xs []string) []string {
	if len(xs) == 0 {
		return nil
	}
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// encoded is Settings on the wire: a version, then the settings.
type encoded struct {
	Version int `json:"version"`
	Settings
}

// Encode returns s as JSON, with its version.
func (s Settings) Encode() ([]byte, error) {
	v := SettingsVersion
	if s.Partitions <= 1 && s.PartitionBy == broker.PartitionByHost {
		v, s.Partitions = 1, 0 // as versions before partitions wrote them
	}
	b, err := json.Marshal(encoded{Version: v, Settings: s})
	if err != nil {
		return nil, fmt.Errorf("encode crawl settings: %w", err)
	}
	return b, nil
}

// DecodeSettings reads what Encode wrote; a later version is an error
// wrapping ErrSettingsVersion.
func DecodeSettings(b []byte) (Settings, error) {
	var e encoded
	if err := json.Unmarshal(b, &e); err != nil {
		return Settings{}, fmt.Errorf("decode crawl settings: %w", err)
	}
	switch {
	case e.Version > SettingsVersion:
		return Settings{}, fmt.Errorf("%w: version %d, this trawl reads up to %d", ErrSettingsVersion, e.Version, SettingsVersion)
	case e.Version < 1:
		return Settings{}, fmt.Errorf("decode crawl settings: no version")
	}
	if e.MaxDepth == 0 || e.MaxDepth < -1 {
		return Settings{}, fmt.Errorf("decode crawl settings: max depth %d: want a positive depth or -1", e.MaxDepth)
	}
	e.Settings.normalize()
	return e.Settings, nil
}

// value returns setting name's value, printed.
func (s Settings) value(name string) string {
	switch name {
	case SettingAllowDomain:
		return listValue(s.AllowedDomains)
	case SettingAllowPrivate:
		return fmt.Sprint(s.AllowPrivate)
	case SettingInclude:
		return listValue(s.Include)
	case SettingExclude:
		return listValue(s.Exclude)
	case SettingMaxDepth:
		if s.MaxDepth < 0 {
			return "unlimited"
		}
		return fmt.Sprint(s.MaxDepth)
	case SettingExtract:
		keys := slices.Sorted(maps.Keys(s.Extract))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + s.Extract[k]
		}
		return listValue(parts)
	case SettingIgnoreRobots:
		return fmt.Sprint(s.IgnoreRobots)
	case SettingMaxLinks:
		return fmt.Sprint(s.MaxLinks)
	case SettingQueryValues:
		if s.MaxQueryValues < 0 {
			return "unlimited"
		}
		return fmt.Sprint(s.MaxQueryValues)
	case SettingHostPages:
		if s.MaxPagesPerHost == 0 {
			return "unlimited"
		}
		return fmt.Sprint(s.MaxPagesPerHost)
	case SettingPartitions:
		return fmt.Sprint(s.Partitions)
	case SettingPartitionBy:
		return s.PartitionBy.String()
	}
	return "?"
}

func listValue(xs []string) string {
	if len(xs) == 0 {
		return "(none)"
	}
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, " ")
}

// set sets setting name of s to its value in from.
func (s *Settings) set(name string, from Settings) {
	switch name {
	case SettingAllowDomain:
		s.AllowedDomains = from.AllowedDomains
	case SettingAllowPrivate:
		s.AllowPrivate = from.AllowPrivate
	case SettingInclude:
		s.Include = from.Include
	case SettingExclude:
		s.Exclude = from.Exclude
	case SettingMaxDepth:
		s.MaxDepth = from.MaxDepth
	case SettingExtract:
		s.Extract = from.Extract
	case SettingIgnoreRobots:
		s.IgnoreRobots = from.IgnoreRobots
	case SettingMaxLinks:
		s.MaxLinks = from.MaxLinks
	case SettingQueryValues:
		s.MaxQueryValues = from.MaxQueryValues
	case SettingHostPages:
		s.MaxPagesPerHost = from.MaxPagesPerHost
	case SettingPartitions:
		s.Partitions = from.Partitions
	case SettingPartitionBy:
		s.PartitionBy = from.PartitionBy
	}
}

// Equal reports whether s and t are the same settings.
func (s Settings) Equal(t Settings) bool {
	for _, n := range SettingNames {
		if s.value(n) != t.value(n) {
			return false
		}
	}
	return slices.Equal(s.TrustedHosts, t.TrustedHosts)
}

// LogAttrs returns s as log attributes, one per setting.
func (s Settings) LogAttrs() []any {
	out := make([]any, 0, 2*len(SettingNames)+2)
	for _, n := range SettingNames {
		out = append(out, n, s.value(n))
	}
	return append(out, "trusted", listValue(s.TrustedHosts))
}

// SettingConflict is one setting a worker insists on with another value
// than the crawl's.
type SettingConflict struct {
	Name   string // as SettingNames
	Stored string // the crawl's value, printed
	Given  string // the worker's value, printed
}

// SettingsError lists the settings a worker insists on against the
// crawl's. It wraps ErrSettingsConflict.
type SettingsError struct {
	Crawl     string
	Conflicts []SettingConflict
	// Fixed says that the conflicts are of settings that cannot be
	// overridden (the partitions).
	Fixed bool
}

func (e *SettingsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "crawl %q: %v:", e.Crawl, ErrSettingsConflict)
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, " --%s: the crawl has %s, this worker was given %s;", c.Name, c.Stored, c.Given)
	}
	if e.Fixed {
		b.WriteString(" leave these flags out to adopt the crawl's; they cannot be overridden, only changed on a stopped crawl (trawl repartition)")
		return b.String()
	}
	b.WriteString(" leave these flags out to adopt the crawl's settings, or override them (trawl: --override-settings; engine: Config.OverrideSettings)")
	return b.String()
}

func (e *SettingsError) Unwrap() error { return ErrSettingsConflict }

// Merge returns the settings of a worker with settings own joining a
// crawl with settings s: the crawl's value of every setting named in
// adopt, own's of every other. The other settings own has with another
// value than s are conflicts. Trusted hosts are the union of both.
func (s Settings) Merge(own Settings, adopt []string) (Settings, []SettingConflict) {
	out := own
	var conflicts []SettingConflict
	for _, n := range SettingNames {
		switch {
		case slices.Contains(adopt, n):
			out.set(n, s)
		case own.value(n) != s.value(n):
			conflicts = append(conflicts, SettingConflict{Name: n, Stored: s.value(n), Given: own.value(n)})
		}
	}
	out.TrustedHosts = sortedSet(append(slices.Clone(s.TrustedHosts), own.TrustedHosts...))
	return out, conflicts
}

// JoinConfig say how a worker joins a crawl's settings.
type JoinConfig struct {
	// Adopt names the settings the worker takes from the crawl whatever
	// it has itself (trawl: the flags not given). The others it insists
	// on.
	Adopt []string
	// Override replaces the crawl's settings by the worker's where they
	// conflict, with a warning, instead of failing.
	Override bool
	// Check, if not nil, vets the settings the worker would crawl by
	// before any is stored: its error is JoinSettings's, and nothing is
	// stored (a refused worker leaves the crawl as it was). stored says
	// whether they are the crawl's (merged with the worker's), or the
	// worker's own for a crawl with none yet.
	Check func(s Settings, stored bool) error
	// Logger receives the Info line listing the settings, and the
	// warning of an override. nil = discard.
	Logger *slog.Logger
}

// JoinSettings returns the settings a worker with settings own crawls
// crawl by, and stores them with the crawl in m. A crawl with no settings
// yet gets own. Otherwise they are the crawl's merged with own (see
// Settings.Merge): a conflict is an error wrapping ErrSettingsConflict (a
// *SettingsError naming each), unless o.Override, and the merge is stored
// if it differs from the crawl's. It logs one Info line listing the
// settings.
func JoinSettings(ctx context.Context, m broker.Metadata, crawl string, own Settings, o JoinConfig) (Settings, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for range 3 {
		raw, err := m.GetMeta(ctx, crawl, settingsKey)
		if errors.Is(err, broker.ErrNotFound) {
			if err := check(o, own, false); err != nil {
				return Settings{}, err
			}
			enc, err := own.Encode()
			if err != nil {
				return Settings{}, err
			}
			err = m.CreateMeta(ctx, crawl, settingsKey, enc)
			if errors.Is(err, broker.ErrExists) {
				continue // another worker stored them first: join those
			}
			if err != nil {
				return Settings{}, fmt.Errorf("crawl %q: store settings: %w", crawl, err)
			}
			log.Info("crawl settings stored with the crawl", append([]any{"crawl", crawl}, own.LogAttrs()...)...)
			return own, nil
		}
		if err != nil {
			return Settings{}, fmt.Errorf("crawl %q: read settings: %w", crawl, err)
		}
		stored, err := DecodeSettings(raw)
		if err != nil {
			return Settings{}, fmt.Errorf("crawl %q: %w", crawl, err)
		}
		out, conflicts := stored.Merge(own, o.Adopt)
		if len(conflicts) > 0 && !o.Override {
			return Settings{}, &SettingsError{Crawl: crawl, Conflicts: conflicts}
		}
		if fixed := slices.DeleteFunc(slices.Clone(conflicts), func(c SettingConflict) bool {
			return !slices.Contains(FixedSettings, c.Name)
		}); len(fixed) > 0 {
			return Settings{}, &SettingsError{Crawl: crawl, Conflicts: fixed, Fixed: true}
		}
		if err := check(o, out, true); err != nil {
			return Settings{}, err
		}
		for _, c := range conflicts {
			log.Warn("overriding the crawl's setting", "crawl", crawl, "setting", c.Name, "stored", c.Stored, "given", c.Given)
		}
		if !out.Equal(stored) {
			enc, err := out.Encode()
			if err != nil {
				return Settings{}, err
			}
			if err := m.SetMeta(ctx, crawl, settingsKey, enc); err != nil {
				return Settings{}, fmt.Errorf("crawl %q: store settings: %w", crawl, err)
			}
		}
		log.Info("crawl settings adopted from the crawl", append([]any{"crawl", crawl}, out.LogAttrs()...)...)
		return out, nil
	}
	return Settings{}, fmt.Errorf("crawl %q: settings keep changing under this worker", crawl)
}

// check is o.Check of s, if any.
func check(o JoinConfig, s Settings, stored bool) error {
	if o.Check == nil {
		return nil
	}
	return o.Check(s, stored)
}

// SetPartitions stores n as the partition count of crawl's settings in m
// (trawl repartition, once it has moved the queued requests).
func SetPartitions(ctx context.Context, m broker.Metadata, crawl string, n int) error {
	raw, err := m.GetMeta(ctx, crawl, settingsKey)
	if err != nil {
		return fmt.Errorf("crawl %q: read settings: %w", crawl, err)
	}
	s, err := DecodeSettings(raw)
	if err != nil {
		return fmt.Errorf("crawl %q: %w", crawl, err)
	}
	s.Partitions = n
	enc, err := s.Encode()
	if err != nil {
		return err
	}
	if err := m.SetMeta(ctx, crawl, settingsKey, enc); err != nil {
		return fmt.Errorf("crawl %q: store settings: %w", crawl, err)
	}
	return nil
}

// PurgeSettings deletes the settings (and any other metadata) of crawl.
func PurgeSettings(ctx context.Context, m broker.Metadata, crawl string) error {
	if err := m.PurgeMeta(ctx, crawl); err != nil {
		return fmt.Errorf("crawl %q: purge settings: %w", crawl, err)
	}
	return nil
}

// apply makes s the crawler's settings: its scope, address guard, trusted
// hosts, extraction and robots. It runs before any page is fetched.
func (c *Crawler) apply(s Settings) error {
	cc := *c.cfg
	cc.AllowedDomains = s.AllowedDomains
	cc.Fetch.AllowPrivate = s.AllowPrivate
	cc.TrustedHosts = s.TrustedHosts
	cc.Include, cc.Exclude = s.Include, s.Exclude
	cc.MaxDepth = s.MaxDepth
	cc.Extract = s.Extract
	cc.IgnoreRobots = s.IgnoreRobots
	cc.MaxLinks, cc.MaxQueryValues, cc.MaxPagesPerHost = s.MaxLinks, s.MaxQueryValues, s.MaxPagesPerHost
	cc.Partitions, cc.PartitionBy = s.Partitions, s.PartitionBy
	var err error
	if cc.include, err = compilePatterns("include", s.Include); err != nil {
		return fmt.Errorf("crawl %q: stored settings: %w", cc.Name, err)
	}
	if cc.exclude, err = compilePatterns("exclude", s.Exclude); err != nil {
		return fmt.Errorf("crawl %q: stored settings: %w", cc.Name, err)
	}
	if c.kit.fetcher != nil {
		c.kit.fetcher.Close()
	}
	return c.build(&cc)
}

// compilePatterns compiles ps, what ("include", "exclude") they are, or
// fails at the first that does not compile.
func compilePatterns(what string, ps []string) ([]*regexp.Regexp, error) {
	out, errs := compileEach(what, ps)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return out, nil
}

// joinCrawl adopts the crawl's settings once, before the crawler seeds or
// crawls (see JoinSettings).
func (c *Crawler) joinCrawl(ctx context.Context) error {
	return c.member.join(func() (bool, error) {
		m := c.metadata()
		if m == nil {
			c.log.Warn("the broker cannot keep the crawl's settings: this worker crawls by its own", "crawl", c.cfg.Name)
			return false, nil
		}
		s, err := JoinSettings(ctx, m, c.cfg.Name, SettingsOf(c.cfg.Config), JoinConfig{
			Adopt: c.cfg.Adopt, Override: c.cfg.OverrideSettings, Logger: c.log,
			Check: c.checkPartitions, // before they are stored: a refused worker stores nothing
		})
		if err != nil {
			return false, err
		}
		own := SettingsOf(c.cfg.Config)
		if err := publishTrust(ctx, m, c.cfg.Name, own.TrustedHosts); err != nil {
			return false, err
		}
		if !s.Equal(own) {
			if err := c.apply(s); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// ErrPartitions is returned by Seed and Run when the crawl's partition
// count is not the broker's (see Config.Partitions).
var ErrPartitions = errors.New("the broker's partitions are not the crawl's")

// checkPartitions returns an error wrapping ErrPartitions unless the
// broker splits its queues into the partitions of s, the crawl's settings
// (stored) or this worker's, for a crawl that has none yet.
func (c *Crawler) checkPartitions(s Settings, stored bool) error {
	n := 1
	if p, ok := c.frontier.Broker().(broker.Partitioned); ok {
		n = p.Partitions()
	}
	if n == s.Partitions {
		return nil
	}
	const which = "only --broker=redis, --broker=nats and --broker=rabbitmq split their queues, opened with the crawl's count; the embedded default and --broker=memory keep one"
	if !stored {
		return fmt.Errorf("crawl %q: %w: given --partitions %d, the broker has %d (%s): run without --partitions",
			c.cfg.Name, ErrPartitions, s.Partitions, n, which)
	}
	return fmt.Errorf("crawl %q: %w: the crawl has %d (stored with it), the broker %d (%s): start the crawl again without --partitions, with --flush or after trawl purge",
		c.cfg.Name, ErrPartitions, s.Partitions, n, which)
}

// partitionKey is the partition key of a request to rawURL (see
// broker.Message.Key); "" when it does not parse.
func (c *Crawler) partitionKey(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return broker.PartitionKey(u.Host, c.cfg.PartitionBy)
}

// metadata is where the crawl's settings are kept, or nil.
func (c *Crawler) metadata() broker.Metadata {
	if c.cfg.Metadata != nil {
		return c.cfg.Metadata
	}
	m, _ := c.frontier.Broker().(broker.Metadata)
	return m
}

// LiveWorkers counts the running workers of crawl that announced
// themselves on p (see Config.Metadata); a command that would spoil a
// running crawl, such as a purge, refuses while it is not 0.
func LiveWorkers(ctx context.Context, p broker.Presence, crawl string) (int, error) {
	n, err := p.Live(ctx, crawl)
	if err != nil {
		return 0, fmt.Errorf("crawl %q: count live workers: %w", crawl, err)
	}
	return n, nil
}
