package rcnssvc

import (
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/access"
)

// Access is who may call each RcnsService RPC (docs/access.md). Proposals
// and the contract gate come from the front door, for agents it proved;
// operators may read and revoke contracts.
func Access() access.Table {
	frontdoor := access.Rule{Services: []string{"frontdoor"}}
	read := access.Rule{Services: []string{"frontdoor"}, Operators: true, Systems: true}
	revoke := access.Rule{Services: []string{"frontdoor"}, Operators: true}
	return access.Table{
		rcnsv1.RcnsService_Propose_FullMethodName:              frontdoor,
		rcnsv1.RcnsService_Gate_FullMethodName:                 frontdoor,
		rcnsv1.RcnsService_GetProposal_FullMethodName:          read,
		rcnsv1.RcnsService_GetContract_FullMethodName:          read,
		rcnsv1.RcnsService_ListContracts_FullMethodName:        read,
		rcnsv1.RcnsService_GetAttempt_FullMethodName:           read,
		rcnsv1.RcnsService_ListPatterns_FullMethodName:         read,
		rcnsv1.RcnsService_GetRecipe_FullMethodName:            read,
		rcnsv1.RcnsService_RevokeContract_FullMethodName:       revoke,
		rcnsv1.RcnsService_RevokeStaleContracts_FullMethodName: revoke,
	}
}
