#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (make fuzz).
#
# A target fails when fuzzing finds an input: go test then writes it to the
# package's testdata/fuzz/<target>/ and exits non-zero. Go 1.26's fuzzing
# coordinator can also exit non-zero at the end of a duration budget, with
# the bare message "context deadline exceeded" and no input written, when a
# worker is still running an input as the time runs out (a race in the
# toolchain, fixed in Go 1.27). Such a run found nothing: this script says
# so, replays the target's committed corpus to be sure, and goes on. Any
# other failure stops it.
set -uo pipefail
cd "$(dirname "$0")/.."

go=${GO:-go}
fuzztime=${FUZZTIME:-30s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

passed=0
stopped=0
for pkg in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$pkg"/*_test.go | sed 's/^func //'); do
		echo "== $pkg $target"
		corpus="$pkg/testdata/fuzz/$target"
		before=$(ls "$corpus" 2>/dev/null)
		if "$go" test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
			passed=$((passed + 1))
			continue
		fi
		after=$(ls "$corpus" 2>/dev/null)
		if [ "$before" != "$after" ]; then
			echo "fuzz: $target found a failing input, written to $corpus" >&2
			exit 1
		fi
		# The coordinator's race ends the output with the target's FAIL
		# line and the bare deadline message, nothing of the target's own.
		if ! grep -A1 -x -- "--- FAIL: $target ([0-9.]*s)" "$log" | tail -n1 | grep -qx '    context deadline exceeded'; then
			echo "fuzz: $target failed" >&2
			exit 1
		fi
		echo "fuzz: $target: fuzzing stopped with Go's end-of-time deadline error and wrote no input; replaying its corpus"
		if ! "$go" test -count=1 -run "^$target\$" "$pkg"; then
			echo "fuzz: $target fails on its committed corpus" >&2
			exit 1
		fi
		stopped=$((stopped + 1))
	done
done
echo "fuzz: $passed targets passed, $stopped stopped by Go's end-of-time deadline error with nothing found"
