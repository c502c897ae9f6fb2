package identitysvc

import (
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/access"
)

// Access is who may call each IdentityService RPC (docs/access.md).
// Registering agents and issuing their certificates is for operators; a
// lifecycle change comes from an operator or from the front door on
// behalf of an agent it proved (the handler takes the caller's key
// fingerprint only from the front door). Sessions are the agent's own,
// so only the front door suspends and resumes them.
func Access() access.Table {
	read := access.Rule{Services: []string{"frontdoor"}, Operators: true, Systems: true}
	return access.Table{
		identityv1.IdentityService_RegisterGenesis_FullMethodName:       {Operators: true},
		identityv1.IdentityService_IssueAgentCertificate_FullMethodName: {Operators: true},
		identityv1.IdentityService_TransitionLifecycle_FullMethodName:   {Services: []string{"frontdoor"}, Operators: true},
		identityv1.IdentityService_SuspendSession_FullMethodName:        {Services: []string{"frontdoor"}},
		identityv1.IdentityService_ResumeSession_FullMethodName:         {Services: []string{"frontdoor"}},
		identityv1.IdentityService_WatchAgents_FullMethodName:           {Services: []string{"frontdoor"}},
		identityv1.IdentityService_ResolveAgent_FullMethodName:          read,
		identityv1.IdentityService_GetIdentityDocument_FullMethodName:   read,
		identityv1.IdentityService_GetGenesis_FullMethodName:            read,
		identityv1.IdentityService_ListAgents_FullMethodName:            read,
		identityv1.IdentityService_GetNamespaceDocument_FullMethodName:  read,
	}
}
