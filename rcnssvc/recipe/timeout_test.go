package recipe_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/rcnssvc/recipe"
)

// A step's timeout_seconds is the deadline its call runs under, and the
// recipe's bounds every step; a step that overruns fails the composition
// as that step, with the deadline as the cause.
func TestRunAppliesStepAndRecipeTimeouts(t *testing.T) {
	r := &recipe.Recipe{Name: "t", Version: "1", TimeoutSeconds: 5, Steps: []recipe.Step{
		{Method: "QUERY", Path: "/a", TimeoutSeconds: 0.05},
		{Method: "QUERY", Path: "/b"},
	}}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	var left []time.Duration
	_, err := r.Run(context.Background(), nil, func(ctx context.Context, method, path string, _ map[string]any) (any, int, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatalf("%s: no deadline", path)
		}
		left = append(left, time.Until(dl))
		return map[string]any{}, 200, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] > 50*time.Millisecond || left[1] < time.Second || left[1] > 5*time.Second {
		t.Fatalf("deadlines %v: want step 1 within its 0.05 s, step 2 within the recipe's 5 s", left)
	}
	r.TimeoutSeconds = 0.05
	start := time.Now()
	_, err = r.Run(context.Background(), nil, func(ctx context.Context, _, path string, _ map[string]any) (any, int, error) {
		if path == "/b" {
			<-ctx.Done()
			return nil, 0, ctx.Err()
		}
		return map[string]any{}, 200, nil
	})
	var f *recipe.Failure
	if !errors.As(err, &f) || f.Step != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v: want step 2 failed by the deadline", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("the recipe deadline did not stop the run")
	}
}

func TestValidateTimeoutRange(t *testing.T) {
	for name, r := range map[string]*recipe.Recipe{
		"negative recipe": {TimeoutSeconds: -1, Steps: []recipe.Step{{Method: "QUERY", Path: "/a"}}},
		"huge step":       {Steps: []recipe.Step{{Method: "QUERY", Path: "/a", TimeoutSeconds: 601}}},
	} {
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "timeout_seconds") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
