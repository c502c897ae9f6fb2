// Package accessref renders the services' access tables (who may call
// each internal RPC) into docs/access.md, from the tables in the code and
// the REST routes of proto/gateway.yaml. The package's test fails when the
// document is stale (`go test ./deploy/accessref -update` rewrites it) and
// when an RPC of any internal API has no rule.
package accessref

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/catalogsvc"
	"github.com/agtpsuite/agtp/identitysvc"
	"github.com/agtpsuite/agtp/policysvc"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/rcnssvc"
	"github.com/agtpsuite/agtp/services/access"
)

// API is one gRPC API: the service that serves it, its descriptor and its
// access table.
type API struct {
	Service string
	Desc    grpc.ServiceDesc
	Table   access.Table
}

// APIs are every internal API of the suite, in the README's order.
func APIs() []API {
	return []API{
		{"catalogsvc", catalogv1.CatalogService_ServiceDesc, catalogsvc.Access()},
		{"policysvc", policyv1.PolicyService_ServiceDesc, policysvc.PolicyAccess()},
		{"policysvc", taskv1.TaskService_ServiceDesc, policysvc.TaskAccess()},
		{"policysvc", agpv1.AgpService_ServiceDesc, policysvc.AGPAccess()},
		{"rcnssvc", rcnsv1.RcnsService_ServiceDesc, rcnssvc.Access()},
		{"identitysvc", identityv1.IdentityService_ServiceDesc, identitysvc.Access()},
		{"auditsvc", auditv1.AuditService_ServiceDesc, auditsvc.Access()},
	}
}

// Methods are the full method names of an API, unary and streaming, in
// the order of its proto file.
func (a API) Methods() []string {
	var out []string
	for _, m := range a.Desc.Methods {
		out = append(out, "/"+a.Desc.ServiceName+"/"+m.MethodName)
	}
	for _, s := range a.Desc.Streams {
		out = append(out, "/"+a.Desc.ServiceName+"/"+s.StreamName)
	}
	return out
}

// Problems are RPCs without a rule and rules for RPCs that do not exist.
func Problems() []string {
	var out []string
	for _, a := range APIs() {
		methods := a.Methods()
		for _, m := range methods {
			if _, ok := a.Table[m]; !ok {
				out = append(out, fmt.Sprintf("%s: %s has no rule (it would be refused to everyone)", a.Service, m))
			}
		}
		for m := range a.Table {
			if !slices.Contains(methods, m) {
				out = append(out, fmt.Sprintf("%s: the rule for %s names no RPC of %s", a.Service, m, a.Desc.ServiceName))
			}
		}
	}
	slices.Sort(out)
	return out
}

// Markdown renders one table per API: each RPC, its REST route (routes
// maps "package.Service.Method" to it, as ReadRoutes reads them), and who
// may call it.
func Markdown(routes map[string]Route) string {
	var b strings.Builder
	for _, a := range APIs() {
		fmt.Fprintf(&b, "### %s (%s)\n\n", a.Desc.ServiceName, a.Service)
		b.WriteString("| RPC | REST route | services | operators | internal systems |\n|---|---|---|---|---|\n")
		for _, m := range a.Methods() {
			r := a.Table[m]
			name := m[strings.LastIndex(m, "/")+1:]
			route := "—"
			if r, ok := routes[a.Desc.ServiceName+"."+name]; ok {
				route = "`" + r.String() + "`"
			}
			services := "—"
			if len(r.Services) > 0 {
				services = strings.Join(r.Services, ", ")
			}
			if r.AnyPeer {
				services = "any verified peer"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", name, route, services, yes(r.Operators || r.AnyPeer), yes(r.Systems || r.AnyPeer))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "—"
}
