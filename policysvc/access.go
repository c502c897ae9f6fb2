package policysvc

import (
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/access"
)

// The rules policysvc's three APIs share.
var (
	// frontdoorOnly: decisions and state changes made for an agent the
	// front door proved.
	frontdoorOnly = access.Rule{Services: []string{"frontdoor"}}
	// readable: state operators and internal systems may read.
	readable = access.Rule{Services: []string{"frontdoor"}, Operators: true, Systems: true}
	// administered: changes the front door makes for a proven caller and
	// operators make directly.
	administered = access.Rule{Services: []string{"frontdoor"}, Operators: true}
)

// PolicyAccess is who may call each PolicyService RPC (docs/access.md).
func PolicyAccess() access.Table {
	return access.Table{
		policyv1.PolicyService_Authorize_FullMethodName:                 frontdoorOnly,
		policyv1.PolicyService_AuthorizeBatch_FullMethodName:            frontdoorOnly,
		policyv1.PolicyService_CompleteIdempotency_FullMethodName:       frontdoorOnly,
		policyv1.PolicyService_ReleaseIdempotency_FullMethodName:        frontdoorOnly,
		policyv1.PolicyService_MarkIdempotencyUnknown_FullMethodName:    frontdoorOnly,
		policyv1.PolicyService_ResolveIdempotencyOutcome_FullMethodName: {Operators: true},
		policyv1.PolicyService_CheckRateLimit_FullMethodName:            {Services: []string{"rcnssvc"}},
		policyv1.PolicyService_GetMerchant_FullMethodName:               readable,
		policyv1.PolicyService_CompleteTaskRun_FullMethodName:           frontdoorOnly,
		policyv1.PolicyService_RetryTask_FullMethodName:                 frontdoorOnly,
	}
}

// TaskAccess is who may call each TaskService RPC (docs/access.md).
// Escalations are answered by operators (the humans the suite escalates
// to); everything an agent starts comes through the front door.
func TaskAccess() access.Table {
	return access.Table{
		taskv1.TaskService_Escalate_FullMethodName:                frontdoorOnly,
		taskv1.TaskService_BeginConfirm_FullMethodName:            frontdoorOnly,
		taskv1.TaskService_CompleteConfirm_FullMethodName:         frontdoorOnly,
		taskv1.TaskService_Notify_FullMethodName:                  frontdoorOnly,
		taskv1.TaskService_RecordDelegation_FullMethodName:        frontdoorOnly,
		taskv1.TaskService_RecordEscalationRouting_FullMethodName: frontdoorOnly,
		taskv1.TaskService_Monitor_FullMethodName:                 frontdoorOnly,
		taskv1.TaskService_CancelMonitor_FullMethodName:           frontdoorOnly,
		taskv1.TaskService_GetTask_FullMethodName:                 readable,
		taskv1.TaskService_GetNotification_FullMethodName:         readable,
		taskv1.TaskService_ListInbox_FullMethodName:               readable,
		taskv1.TaskService_ListEscalations_FullMethodName:         {Operators: true, Systems: true},
		taskv1.TaskService_ResolveEscalation_FullMethodName:       {Operators: true},
	}
}

// AGPAccess is who may call each AgpService RPC (docs/access.md). Key
// resolution, confirmations and transactions serve the front door's AGP
// binding; keys are managed (and their changes watched) by operators
// and, for holders of AGP admin keys it verified, by the front door.
func AGPAccess() access.Table {
	return access.Table{
		agpv1.AgpService_ResolveApiKey_FullMethodName:       frontdoorOnly,
		agpv1.AgpService_WatchKeyEvents_FullMethodName:      administered,
		agpv1.AgpService_IssueConfirmation_FullMethodName:   frontdoorOnly,
		agpv1.AgpService_ConsumeConfirmation_FullMethodName: frontdoorOnly,
		agpv1.AgpService_PutTransaction_FullMethodName:      frontdoorOnly,
		agpv1.AgpService_GetTransaction_FullMethodName:      readable,
		agpv1.AgpService_CreateApiKey_FullMethodName:        administered,
		agpv1.AgpService_RevokeApiKey_FullMethodName:        administered,
		agpv1.AgpService_ListApiKeys_FullMethodName:         readable,
		agpv1.AgpService_ImportApiKey_FullMethodName:        {Operators: true},
	}
}
