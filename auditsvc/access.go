package auditsvc

import (
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/access"
)

// Access is who may call each AuditService RPC (docs/access.md). Only the
// front door signs records for agents: it is the one service that proves
// who the agent is. Lifecycle events come from the services that change
// an agent's standing or record (policysvc: escalations people resolve,
// AGP keys revoked); reading the chains is for operators, compliance
// systems and the front door's INSPECT.
func Access() access.Table {
	read := access.Rule{Services: []string{"frontdoor"}, Operators: true, Systems: true}
	return access.Table{
		auditv1.AuditService_SignAndAppend_FullMethodName:        {Services: []string{"frontdoor"}},
		auditv1.AuditService_SignAndAppendBatch_FullMethodName:   {Services: []string{"frontdoor"}},
		auditv1.AuditService_AppendSignedRecord_FullMethodName:   {Services: []string{"frontdoor"}},
		auditv1.AuditService_AppendLifecycleEvent_FullMethodName: {Services: []string{"identitysvc", "rcnssvc", "policysvc"}},
		auditv1.AuditService_GetRecord_FullMethodName:            read,
		auditv1.AuditService_GetChainHead_FullMethodName:         read,
		auditv1.AuditService_ListLifecycleEvents_FullMethodName:  read,
		auditv1.AuditService_GetSigningKeys_FullMethodName:       read,
		auditv1.AuditService_VerifyChain_FullMethodName:          {Operators: true, Systems: true},
		// A whole chain at a time is for verifiers and reporting, not the
		// request path.
		auditv1.AuditService_ExportChain_FullMethodName: {Operators: true, Systems: true},
	}
}
