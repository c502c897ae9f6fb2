//go:build !linux

package loadgen

import "errors"

// runAtIdlePriority needs Linux's SCHED_IDLE class.
func runAtIdlePriority() error { return errors.New("an idle scheduling class needs Linux") }
