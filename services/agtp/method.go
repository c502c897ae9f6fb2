package agtp

// The 18 floor methods every conformant server supports (core §7.1,
// §11.2).
const (
	MethodQuery      = "QUERY"
	MethodDiscover   = "DISCOVER"
	MethodDescribe   = "DESCRIBE"
	MethodInspect    = "INSPECT"
	MethodSummarize  = "SUMMARIZE"
	MethodPlan       = "PLAN"
	MethodPropose    = "PROPOSE"
	MethodExecute    = "EXECUTE"
	MethodDelegate   = "DELEGATE"
	MethodEscalate   = "ESCALATE"
	MethodConfirm    = "CONFIRM"
	MethodSuspend    = "SUSPEND"
	MethodNotify     = "NOTIFY"
	MethodActivate   = "ACTIVATE"
	MethodDeactivate = "DEACTIVATE"
	MethodReinstate  = "REINSTATE"
	MethodRevoke     = "REVOKE"
	MethodDeprecate  = "DEPRECATE"
)

// FloorMethods returns the 18 floor methods in the order of core §7.3.
func FloorMethods() []string {
	return []string{
		MethodQuery, MethodDiscover, MethodDescribe, MethodInspect, MethodSummarize,
		MethodPlan, MethodPropose,
		MethodExecute, MethodDelegate, MethodEscalate, MethodConfirm, MethodSuspend,
		MethodNotify,
		MethodActivate, MethodDeactivate, MethodReinstate, MethodRevoke, MethodDeprecate,
	}
}

// IsFloorMethod reports whether m is one of the 18 floor methods. The
// comparison is exact: "query" is not a method.
func IsFloorMethod(m string) bool {
	switch m {
	case MethodQuery, MethodDiscover, MethodDescribe, MethodInspect, MethodSummarize,
		MethodPlan, MethodPropose,
		MethodExecute, MethodDelegate, MethodEscalate, MethodConfirm, MethodSuspend,
		MethodNotify,
		MethodActivate, MethodDeactivate, MethodReinstate, MethodRevoke, MethodDeprecate:
		return true
	}
	return false
}

// ValidMethodToken reports whether m matches ^[A-Z]{3,32}$, the lexical
// rule of AGTP-API §3.2. ReadRequest answers any other method token with
// 459 method-invalid and never upper-cases it for the client
// (docs/decisions.md#D-method-token); whether a valid token is in the
// catalog is the server's next check, not this package's.
func ValidMethodToken(m string) bool {
	if len(m) < 3 || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return false
		}
	}
	return true
}
