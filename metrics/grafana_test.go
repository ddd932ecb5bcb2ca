package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawlhq/trawl/engine"
	"github.com/trawlhq/trawl/metrics"
)

// grafanaBoard is the Grafana dashboard of the metrics.
const grafanaBoard = "../deploy/grafana/trawl.json"

// TestGrafanaBoard: the Grafana dashboard under deploy/ is JSON whose
// queries name only metrics this package exports, so that renaming one
// does not leave an empty panel.
func TestGrafanaBoard(t *testing.T) {
	data, err := os.ReadFile(grafanaBoard)
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &board); err != nil {
		t.Fatalf("%s: %v", grafanaBoard, err)
	}
	exported := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		metrics.New(metrics.Config{Name: "x", Stats: engine.NewStats()}).Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	// Every name in the file: the panels' queries and the variables'.
	name := regexp.MustCompile(`\btrawl_[a-z_]+`)
	for _, n := range name.FindAllString(string(data), -1) {
		if !exported[n] && !exported[strings.TrimSuffix(n, "_bucket")] {
			t.Errorf("%s queries %s, which package metrics does not export", grafanaBoard, n)
		}
	}
	queries := 0
	for _, p := range board.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has a target without a query", p.Title)
			}
			queries++
		}
	}
	if queries == 0 || len(exported) == 0 {
		t.Errorf("%d queries, %d metrics exported: nothing checked", queries, len(exported))
	}
}
