package agtp

import "testing"

func TestParseBudgetDraftExample(t *testing.T) {
	b, err := ParseBudget("tokens=5000, compute-seconds=120, financial=10.00USD, ttl=3600")
	if err != nil {
		t.Fatal(err)
	}
	want := Budget{
		{Unit: "tokens", Value: "5000", Amount: 5000_000000, Known: true},
		{Unit: "compute-seconds", Value: "120", Amount: 120_000000, Known: true},
		{Unit: "financial", Value: "10.00USD", Amount: 10_000000, Currency: "USD", Known: true},
		{Unit: "ttl", Value: "3600", Amount: 3600_000000, Known: true},
	}
	if len(b) != len(want) {
		t.Fatalf("got %+v", b)
	}
	for i := range b {
		if b[i] != want[i] {
			t.Errorf("item %d = %+v, want %+v", i, b[i], want[i])
		}
	}
	if b.String() != "tokens=5000, compute-seconds=120, financial=10.00USD, ttl=3600" {
		t.Errorf("String = %q", b.String())
	}
}

func TestParseBudgetUnits(t *testing.T) {
	valid := []struct {
		in       string
		unit     string
		amount   int64
		currency string
		known    bool
	}{
		{"TOKENS=7", "tokens", 7_000000, "", true},
		{"calls=3", "calls", 3_000000, "", true},
		{"compute-seconds=1.5", "compute-seconds", 1_500000, "", true},
		{"compute-seconds=0.000001", "compute-seconds", 1, "", true},
		{"USD=10.5", "USD", 10_500000, "USD", true},
		{"eur=3", "EUR", 3_000000, "EUR", true},
		{"GBP=0.01", "GBP", 10000, "GBP", true},
		{"financial=2.50eur", "financial", 2_500000, "EUR", true},
		{"gpu-hours=2.5", "gpu-hours", 2_500000, "", false},
		{"widgets=lots", "widgets", 0, "", false},
	}
	for _, tt := range valid {
		b, err := ParseBudget(tt.in)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		it := b[0]
		if it.Unit != tt.unit || it.Amount != tt.amount || it.Currency != tt.currency || it.Known != tt.known {
			t.Errorf("%q = %+v", tt.in, it)
		}
	}
	invalid := []string{
		"", ",", "tokens", "tokens=", "=5", "tokens=1.5", "tokens=-1", "calls=1e3",
		"USD=10.001", "compute-seconds=1.", "compute-seconds=.5", "compute-seconds=1.0000001",
		"financial=10.00", "financial=10.00US", "financial=USD", "ttl=1h",
		"tokens=1, tokens=2", "USD=1, financial=2.00USD", "tokens=1 2", "tokens=1234567890123",
	}
	for _, in := range invalid {
		_, err := ParseBudget(in)
		wantProtocolError(t, err, 400, ReasonInvalidBudget, false)
	}
	// Different currencies are different limits.
	if _, err := ParseBudget("financial=1.00USD, EUR=2"); err != nil {
		t.Error(err)
	}
}

func TestBudgetCheck(t *testing.T) {
	limit, _ := ParseBudget("tokens=5000, financial=10.00USD")
	tests := []struct {
		cost string
		ok   bool
		over string
	}{
		{"tokens=5000", true, ""},
		{"tokens=5001", false, "tokens"},
		{"USD=9.99", true, ""},
		{"USD=10.01", false, "USD"},
		{"financial=11.00USD", false, "financial"},
		{"financial=11.00EUR", true, ""}, // no EUR limit
		{"calls=1000000", true, ""},      // unit not limited
		{"widgets=99", true, ""},
	}
	for _, tt := range tests {
		cost, err := ParseBudget(tt.cost)
		if err != nil {
			t.Fatal(err)
		}
		over, ok := limit.Check(cost)
		if ok != tt.ok || over.Unit != tt.over {
			t.Errorf("Check(%s) = %q, %v; want %q, %v", tt.cost, over.Unit, ok, tt.over, tt.ok)
		}
	}
	if it, ok := limit.Get("TOKENS"); !ok || it.Amount != 5000_000000 {
		t.Errorf("Get = %+v, %v", it, ok)
	}
	if _, ok := limit.Get("calls"); ok {
		t.Error("Get found an absent unit")
	}
}
