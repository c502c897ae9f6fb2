package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// The shipped dashboard and alerting rules (deploy/observability) are
// checked offline: the rules parse as a Prometheus rule file (rulefmt, the
// code `promtool check rules` runs, which also parses each expression and
// template), every expression of the rules and of the dashboard's panels
// parses as PromQL, and every metric they select is one the suite exports,
// as listed in metrics.txt (which a test in the main module keeps true by
// scraping the running suite).

var promql = parser.NewParser(parser.Options{})

// ReadMetricNames reads the committed list of exported series names: one
// a line, # comments.
func ReadMetricNames(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names[line] = true
	}
	return names, sc.Err()
}

// CheckRules parses a Prometheus rule file and returns the metric names
// its expressions select.
func CheckRules(content []byte) ([]string, error) {
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var names []string
	rules := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules++
			n, err := metricNames(r.Expr)
			if err != nil {
				return nil, fmt.Errorf("rule %s%s: %w", r.Alert, r.Record, err)
			}
			names = append(names, n...)
		}
	}
	if rules == 0 {
		return nil, errors.New("no rules")
	}
	return names, nil
}

// grafanaVars are the dashboard variables an expression may use; they are
// replaced by values of the right kind before parsing.
var grafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range|\{?[A-Za-z_][A-Za-z0-9_]*\}?)`)

func expandGrafana(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		switch v {
		case "$__rate_interval", "$__interval", "$__range":
			return "5m"
		}
		return "x"
	})
}

// dashboard is what the check reads of a Grafana dashboard.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string   `json:"title"`
	Panels  []panel  `json:"panels"` // rows
	Targets []target `json:"targets"`
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// CheckDashboard decodes a Grafana dashboard and returns the metric names
// its panels' expressions select.
func CheckDashboard(content []byte) ([]string, error) {
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(content))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	if d.Title == "" || d.UID == "" {
		return nil, errors.New("dashboard has no title or uid")
	}
	var names []string
	exprs := 0
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if err := walk(p.Panels); err != nil {
				return err
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("panel %q target %s has no expression", p.Title, t.RefID)
				}
				exprs++
				n, err := metricNames(expandGrafana(t.Expr))
				if err != nil {
					return fmt.Errorf("panel %q target %s: %w", p.Title, t.RefID, err)
				}
				names = append(names, n...)
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	if exprs == 0 {
		return nil, errors.New("dashboard has no expressions")
	}
	return names, nil
}

// metricNames parses a PromQL expression and returns the metric names of
// its selectors; a selector without a name is an error (it would match
// every series).
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				err = fmt.Errorf("selector %s names no metric", vs)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, err
}

// Unexported returns the names not in the exported list, once each, sorted.
func Unexported(names []string, exported map[string]bool) []string {
	var out []string
	for _, n := range names {
		if !exported[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
