package agtp

import (
	"strconv"
	"strings"
)

// Budget units: the initial registry of core §11.7, plus ttl and
// financial, which the draft's own Budget-Limit example uses without
// registering (docs/decisions.md#D-budget-units).
const (
	UnitTokens         = "tokens"          // integer
	UnitComputeSeconds = "compute-seconds" // decimal
	UnitUSD            = "USD"             // decimal, 2 places
	UnitEUR            = "EUR"             // decimal, 2 places
	UnitGBP            = "GBP"             // decimal, 2 places
	UnitCalls          = "calls"           // integer
	UnitTTL            = "ttl"             // integer seconds
	UnitFinancial      = "financial"       // decimal (2 places) + ISO 4217 code: 10.00USD
)

// BudgetItem is one unit=value element of a Budget-Limit or
// Cost-Estimate value.
type BudgetItem struct {
	// Unit is the registry spelling for a known unit (matched
	// case-insensitively), else the name as received.
	Unit string
	// Value is the value as received, e.g. "120" or "10.00USD".
	Value string
	// Amount is the value in millionths, exact: "10.00USD" gives
	// 10_000_000 and "tokens=5000" gives 5_000_000_000. Millionths let
	// integer, decimal and money units compare without floating point.
	// For an unknown unit whose value is not a plain decimal it is 0.
	Amount int64
	// Currency is the ISO 4217 code of a money amount (USD=..., or the
	// suffix of financial=...), else "".
	Currency string
	// Known reports whether Unit is one of the units above. Unknown units
	// are kept, not refused: Budget-Limit is reserved, and core §5.5.5
	// forbids rejecting a request because of it.
	Known bool
}

// Budget is a parsed Budget-Limit or Cost-Estimate value (core §5.5.5,
// §5.5.4): comma-separated unit=value elements, e.g.
//
//	tokens=5000, compute-seconds=120, financial=10.00USD, ttl=3600
type Budget []BudgetItem

// ParseBudget parses a Budget-Limit or Cost-Estimate value. Known units
// must carry a value of their registered format; a unit may appear only
// once (once per currency for money). Errors are *ProtocolError values
// with status 400 and reason invalid-budget.
func ParseBudget(v string) (Budget, error) {
	var b Budget
	for elem := range strings.SplitSeq(v, ",") {
		elem = trimOWS(elem)
		if elem == "" {
			continue
		}
		unit, value, ok := strings.Cut(elem, "=")
		unit, value = trimOWS(unit), trimOWS(value)
		if !ok || !validToken(unit) || !validToken(value) {
			return nil, budgetError(elem, "is not unit=value")
		}
		it, err := parseBudgetItem(unit, value)
		if err != nil {
			return nil, err
		}
		for _, prev := range b {
			if prev.key() == it.key() {
				return nil, budgetError(elem, "repeats a unit")
			}
		}
		b = append(b, it)
	}
	if len(b) == 0 {
		return nil, budgetError(v, "holds no unit=value element")
	}
	return b, nil
}

func parseBudgetItem(unit, value string) (BudgetItem, error) {
	it := BudgetItem{Unit: unit, Value: value, Known: true}
	var ok bool
	switch {
	case equalFold(unit, UnitTokens), equalFold(unit, UnitCalls), equalFold(unit, UnitTTL):
		it.Unit = strings.ToLower(unit)
		it.Amount, ok = parseMicros(value, 0)
	case equalFold(unit, UnitComputeSeconds):
		it.Unit = UnitComputeSeconds
		it.Amount, ok = parseMicros(value, 6)
	case equalFold(unit, UnitUSD), equalFold(unit, UnitEUR), equalFold(unit, UnitGBP):
		it.Unit = strings.ToUpper(unit)
		it.Currency = it.Unit
		it.Amount, ok = parseMicros(value, 2)
	case equalFold(unit, UnitFinancial):
		it.Unit = UnitFinancial
		if len(value) > 3 && isAlpha3(value[len(value)-3:]) {
			it.Currency = strings.ToUpper(value[len(value)-3:])
			it.Amount, ok = parseMicros(value[:len(value)-3], 2)
		}
	default:
		it.Known = false
		it.Amount, _ = parseMicros(value, 6)
		ok = true
	}
	if !ok {
		return BudgetItem{}, budgetError(unit+"="+value, "has a value not in the unit's format")
	}
	return it, nil
}

// key identifies what an item limits: money by currency, so that
// USD=5.00 and financial=10.00USD constrain the same thing.
func (it BudgetItem) key() string {
	if it.Currency != "" {
		return "$" + it.Currency
	}
	return it.Unit
}

func isAlpha3(s string) bool {
	for i := 0; i < len(s); i++ {
		if !('a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z') {
			return false
		}
	}
	return len(s) == 3
}

// parseMicros parses 1*DIGIT [ "." 1*places DIGIT ] into millionths.
// The integer part is capped at 12 digits so the result fits an int64.
func parseMicros(s string, places int) (int64, bool) {
	ip, fp, dot := strings.Cut(s, ".")
	if ip == "" || len(ip) > 12 || dot && (fp == "" || len(fp) > places) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(ip); i++ {
		if ip[i] < '0' || ip[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(ip[i]-'0')
	}
	var f int64
	for i := 0; i < 6; i++ {
		f *= 10
		if i < len(fp) {
			if fp[i] < '0' || fp[i] > '9' {
				return 0, false
			}
			f += int64(fp[i] - '0')
		}
	}
	return n*1_000_000 + f, true
}

func budgetError(elem, why string) *ProtocolError {
	return badRequest(ReasonInvalidBudget, "budget "+strconv.Quote(elem)+" "+why, false)
}

// String returns the header form, elements joined by ", ".
func (b Budget) String() string {
	var sb strings.Builder
	for i, it := range b {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(it.Unit)
		sb.WriteByte('=')
		sb.WriteString(it.Value)
	}
	return sb.String()
}

// Get returns the item for unit (case-insensitive).
func (b Budget) Get(unit string) (BudgetItem, bool) {
	for _, it := range b {
		if equalFold(it.Unit, unit) {
			return it, true
		}
	}
	return BudgetItem{}, false
}

// Check reports whether cost fits within the limit b. Each known item of
// cost is compared with b's item for the same unit (money: the same
// currency, whichever unit spells it); units b does not mention are not
// constrained. When cost does not fit, Check returns the first item over
// the limit, for the 456 explanation.
func (b Budget) Check(cost Budget) (BudgetItem, bool) {
	for _, c := range cost {
		if !c.Known {
			continue
		}
		for _, l := range b {
			if l.Known && l.key() == c.key() && c.Amount > l.Amount {
				return c, false
			}
		}
	}
	return BudgetItem{}, true
}
