package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Ms formats a duration in milliseconds with three significant digits.
func Ms(d time.Duration) string {
	v := ms(d)
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// WriteTable writes a Markdown table with one row per run: load,
// throughput, latency percentiles, errors, and the front door's CPU cost.
// frontdoor names the front door's entry in Result.CPU.
func WriteTable(w io.Writer, results []*Result, frontdoor string) {
	fmt.Fprintln(w, "| run | transport | in flight | offered req/s | achieved req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | 2xx | no response | front-door CPU µs/req | req/s per front-door core | machine busy | load avg |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		offered := "closed loop"
		if r.Rate > 0 {
			offered = fmt.Sprintf("%.0f", r.Rate)
		}
		noResp := fmt.Sprintf("%d", r.Failed)
		if r.Unsent > 0 {
			noResp += fmt.Sprintf(" (+%d unsent)", r.Unsent)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %.1f%% | %s | %.0f | %.0f | %.0f%% | %.2f |\n",
			r.Name, r.Transport, r.Concurrency, offered, r.Throughput,
			Ms(r.Latency.P50), Ms(r.Latency.P90), Ms(r.Latency.P99), Ms(r.Latency.P999), Ms(r.Latency.Max),
			100*r.SuccessRatio(), noResp,
			float64(r.CPUPerRequest(frontdoor))/float64(time.Microsecond), r.PerCPUSecond(frontdoor),
			100*r.MachineBusy, r.LoadAvg[0])
	}
}

// WriteCPU writes, per run, each process's CPU time per request in
// microseconds, with procs as the column order.
func WriteCPU(w io.Writer, results []*Result, procs []string) {
	writePerProc(w, results, procs, "%.0f", func(r *Result, p string) float64 {
		return float64(r.CPUPerRequest(p)) / float64(time.Microsecond)
	})
}

// WriteCtxSwitches writes, per run, each process's context switches per
// request, with procs as the column order.
func WriteCtxSwitches(w io.Writer, results []*Result, procs []string) {
	// One decimal: with many requests in flight a process can switch
	// less than once per request.
	writePerProc(w, results, procs, "%.1f", (*Result).CtxSwitchesPerRequest)
}

// WriteRunqueueWait writes, per run, how long each process's threads
// waited for a CPU per request, in microseconds.
func WriteRunqueueWait(w io.Writer, results []*Result, procs []string) {
	writePerProc(w, results, procs, "%.0f", func(r *Result, p string) float64 {
		return float64(r.RunqueueWaitPerRequest(p)) / float64(time.Microsecond)
	})
}

// writePerProc writes a table of one figure per run and process, with a
// total per run.
func writePerProc(w io.Writer, results []*Result, procs []string, format string, perReq func(*Result, string) float64) {
	fmt.Fprintf(w, "| run | %s | total |\n", strings.Join(procs, " | "))
	fmt.Fprintf(w, "|---|%s---:|\n", strings.Repeat("---:|", len(procs)))
	for _, r := range results {
		var total float64
		cells := make([]string, len(procs))
		for i, p := range procs {
			v := perReq(r, p)
			total += v
			cells[i] = fmt.Sprintf(format, v)
		}
		fmt.Fprintf(w, "| %s | %s | "+format+" |\n", r.Name, strings.Join(cells, " | "), total)
	}
}

// WriteOps writes a run's per-operation breakdown: count, statuses and
// latency.
func WriteOps(w io.Writer, r *Result) {
	fmt.Fprintln(w, "| operation | responses | statuses | no response | p50 ms | p99 ms | max ms |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|")
	for _, op := range Ops {
		o, ok := r.PerOp[op]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %d | %s | %s | %s |\n", op, o.Completed, FormatStatuses(o.Statuses), o.Errors,
			Ms(o.Latency.P50), Ms(o.Latency.P99), Ms(o.Latency.Max))
	}
	if len(r.TransportErrors) > 0 {
		keys := make([]string, 0, len(r.TransportErrors))
		for k := range r.TransportErrors {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", k, r.TransportErrors[k])
		}
		fmt.Fprintf(w, "\nRequests without a response, by transport error: %s. First messages:\n\n", strings.Join(parts, ", "))
		for _, k := range keys {
			for _, m := range r.ErrorExamples[k] {
				fmt.Fprintf(w, "- `%s`\n", strings.ReplaceAll(m, "`", "'"))
			}
		}
	}
}

// FormatStatuses writes status counts as "200×95 404×5".
func FormatStatuses(m map[int]uint64) string {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", c, m[c])
	}
	return strings.Join(parts, " ")
}
