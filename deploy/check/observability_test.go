package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var observability = filepath.Join("..", "observability")

func TestShippedRulesAndDashboardUseExportedMetrics(t *testing.T) {
	exported, err := ReadMetricNames(filepath.Join(observability, "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(exported) == 0 {
		t.Fatal("metrics.txt lists no metric")
	}
	for _, tc := range []struct {
		file  string
		check func([]byte) ([]string, error)
	}{
		{"alerts.yaml", CheckRules},
		{"dashboard.json", CheckDashboard},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(observability, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			names, err := tc.check(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) == 0 {
				t.Fatal("no metric is used")
			}
			if bad := Unexported(names, exported); len(bad) > 0 {
				t.Errorf("%s uses metrics the suite does not export (metrics.txt): %s", tc.file, strings.Join(bad, ", "))
			}
		})
	}
}

// TestObservabilityChecksCatchMistakes feeds broken rules and dashboards
// to the checks, so that a check that stopped checking fails here.
func TestObservabilityChecksCatchMistakes(t *testing.T) {
	exported := map[string]bool{"agtp_server_requests_total": true}
	for _, tc := range []struct {
		name      string
		rules     string
		dashboard string
		want      string // in the error, or the unexported name
	}{
		{name: "rule expression does not parse", rules: "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum(rate(agtp_server_requests_total[5m])\n", want: "unclosed"},
		{name: "rule without alert or record", rules: "groups:\n- name: g\n  rules:\n  - expr: agtp_server_requests_total\n", want: "one of 'record' or 'alert'"},
		{name: "rule template does not parse", rules: "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: agtp_server_requests_total > 0\n    annotations:\n      summary: \"{{ $value \"\n", want: "template"},
		{name: "unknown field in a rule", rules: "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up\n    severity: page\n", want: "severity"},
		{name: "rule uses a metric nobody exports", rules: "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(agtp_server_request_total[5m]) > 0\n", want: "agtp_server_request_total"},
		{name: "dashboard is not JSON", dashboard: `{"title": "x", `, want: "dashboard JSON"},
		{name: "panel expression does not parse", dashboard: `{"title":"x","uid":"x","panels":[{"title":"p","targets":[{"refId":"A","expr":"sum by (job (agtp_server_requests_total)"}]}]}`, want: "panel \"p\""},
		{name: "panel selector without a name", dashboard: `{"title":"x","uid":"x","panels":[{"title":"p","targets":[{"refId":"A","expr":"{job=\"x\"}"}]}]}`, want: "names no metric"},
		{name: "panel in a row uses a metric nobody exports", dashboard: `{"title":"x","uid":"x","panels":[{"title":"row","panels":[{"title":"p","targets":[{"refId":"A","expr":"rate(agtp_nope_total{job=~\"$job\"}[$__rate_interval])"}]}]}]}`, want: "agtp_nope_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			var err error
			if tc.rules != "" {
				names, err = CheckRules([]byte(tc.rules))
			} else {
				names, err = CheckDashboard([]byte(tc.dashboard))
			}
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = strings.Join(Unexported(names, exported), ",")
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want it to mention %q", got, tc.want)
			}
		})
	}
}
