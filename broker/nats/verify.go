package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrDamaged is returned by Embedded.Verify when a stream of the store holds
// less than it did when the store was last closed: its files were
// truncated, deleted or damaged in between (JetStream recovers what it can
// read and says nothing).
var ErrDamaged = errors.New("nats embedded: the store was damaged since it was last closed")

// checkpointFile, in the data directory, records what each stream held
// when the store was last closed (Shutdown), or that it is open.
const checkpointFile = "trawl-streams.json"

// checkpoint is the content of checkpointFile.
type checkpoint struct {
	// Open: the store is open, or its last user was killed: what it holds
	// cannot be checked.
	Open    bool                   `json:"open,omitempty"`
	Streams map[string]streamState `json:"streams,omitempty"`
}

// streamState is what a stream held: messages, and its last sequence.
type streamState struct {
	Msgs    uint64 `json:"msgs"`
	LastSeq uint64 `json:"last_seq"`
}

// readCheckpoint reads dir's checkpoint; nil when there is none (a store
// made before trawl kept one) or it cannot be read (logged).
func readCheckpoint(dir string, log *slog.Logger) *checkpoint {
	data, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var c checkpoint
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	if err != nil {
		log.Warn("the store's record of its streams cannot be read; the store is not checked", "file", filepath.Join(dir, checkpointFile), "err", err)
		return nil
	}
	return &c
}

// saveCheckpoint replaces dir's checkpoint with c.
func saveCheckpoint(dir string, c checkpoint) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, checkpointFile)
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// Verify checks that every stream holds at least what it held when the
// store was last closed: nothing consumes a stream while the store is
// closed, so fewer messages, or an earlier last sequence, means its files
// were truncated, deleted or damaged. It returns an error wrapping
// ErrDamaged naming each such stream and its directory; Shutdown then
// keeps the record of the store as it was, so that every later start says
// the same until the store is emptied (see Reset). A store whose last user
// was killed, or that no version of trawl that keeps the record closed,
// cannot be checked: Verify says so at Debug and returns nil.
func (e *Embedded) Verify(ctx context.Context) error {
	cp := e.checkpoint
	switch {
	case cp == nil:
		e.log.Debug("the store has no record of its streams (never closed by this version): not checked")
		return nil
	case cp.Open:
		e.log.Debug("the store was not closed last time (a process killed): not checked")
		return nil
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		return fmt.Errorf("nats embedded: verify: %w", err)
	}
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(cp.Streams)) {
		want := cp.Streams[name]
		dir := filepath.Join(e.dir, "jetstream", "$G", "streams", name)
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			bad = append(bad, fmt.Sprintf("stream %s (%s) is gone, with its %d messages", name, dir, want.Msgs))
			continue
		}
		if err != nil {
			return fmt.Errorf("nats embedded: verify stream %s: %w", name, err)
		}
		got := s.CachedInfo().State
		if got.Msgs < want.Msgs || got.LastSeq < want.LastSeq {
			bad = append(bad, fmt.Sprintf("stream %s (%s) holds %d messages up to sequence %d, where it held %d up to %d",
				name, dir, got.Msgs, got.LastSeq, want.Msgs, want.LastSeq))
		}
	}
	if len(bad) > 0 {
		e.keep.Store(true)
		return fmt.Errorf("%w: %s; its files were truncated, deleted or damaged, and what they held is lost: start again with --flush",
			ErrDamaged, strings.Join(bad, "; "))
	}
	return nil
}

// Reset takes back what Verify found: the store is about to be emptied,
// and Shutdown records what it holds then.
func (e *Embedded) Reset() { e.keep.Store(false) }

// writeCheckpoint records what every stream holds, for the next Verify;
// or, after Verify found the store damaged, what it held before.
func (e *Embedded) writeCheckpoint() {
	if e.keep.Load() {
		if e.checkpoint != nil {
			if err := saveCheckpoint(e.dir, *e.checkpoint); err != nil {
				e.log.Warn("the store's record of its streams was not kept: the next start cannot check them", "err", err)
			}
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.log.Warn("the store's streams were not recorded: the next start cannot check them", "err", err)
		return
	}
	cp := checkpoint{Streams: map[string]streamState{}}
	names := js.ListStreams(ctx)
	for info := range names.Info() {
		cp.Streams[info.Config.Name] = streamState{Msgs: info.State.Msgs, LastSeq: info.State.LastSeq}
	}
	if err := names.Err(); err != nil {
		e.log.Warn("the store's streams were not recorded: the next start cannot check them", "err", err)
		return
	}
	if err := saveCheckpoint(e.dir, cp); err != nil {
		e.log.Warn("the store's streams were not recorded: the next start cannot check them", "err", err)
	}
}
