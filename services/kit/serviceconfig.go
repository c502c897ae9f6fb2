package kit

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// readOnlyLookups are the unary RPCs besides Get* and List* that change
// nothing and so may be sent again: a verification and three lookups.
// Resolve* RPCs that settle something (ResolveEscalation,
// ResolveIdempotencyOutcome) are not here, nor CheckRateLimit, which
// counts.
var readOnlyLookups = []string{"VerifyChain", "ResolveApiKey", "ResolveRoute", "ResolveAgent"}

// retrySafe reports whether a unary RPC of the suite only reads.
func retrySafe(m protoreflect.MethodDescriptor) bool {
	if m.IsStreamingClient() || m.IsStreamingServer() {
		return false
	}
	name := string(m.Name())
	return strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List") || slices.Contains(readOnlyLookups, name)
}

// clientServiceConfig is the gRPC service config every internal client
// dials with (https://github.com/grpc/grpc/blob/master/doc/service_config.md):
// round_robin over every address the name resolves to, so that a
// headless Kubernetes service's replicas share the load instead of one
// long-lived connection pinning a client to one pod; and a retry policy
// for the RPCs that only read, which a replica going away mid-call
// (UNAVAILABLE) must not turn into an error. RPCs that change state are
// not retried here: the ones that need it carry a request ID and retry
// themselves (auditsvc/auditclient).
func clientServiceConfig() string {
	type name struct {
		Service string `json:"service"`
		Method  string `json:"method"`
	}
	var safe []name
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(f.Package()), "agtp.") {
			return true
		}
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				if m := s.Methods().Get(j); retrySafe(m) {
					safe = append(safe, name{string(s.FullName()), string(m.Name())})
				}
			}
		}
		return true
	})
	slices.SortFunc(safe, func(a, b name) int { return strings.Compare(a.Service+"/"+a.Method, b.Service+"/"+b.Method) })
	safe = append(safe, name{Service: "grpc.health.v1.Health", Method: "Check"})
	cfg := map[string]any{
		"loadBalancingConfig": []any{map[string]any{"round_robin": map[string]any{}}},
		"methodConfig": []any{map[string]any{
			"name": safe,
			"retryPolicy": map[string]any{
				"maxAttempts":          3,
				"initialBackoff":       "0.05s",
				"maxBackoff":           "0.5s",
				"backoffMultiplier":    2,
				"retryableStatusCodes": []string{"UNAVAILABLE"},
			},
		}},
	}
	b, _ := json.Marshal(cfg) // maps and strings always marshal
	return string(b)
}

// defaultServiceConfig is computed once, after every generated package
// registered its files.
var defaultServiceConfig = sync.OnceValue(clientServiceConfig)
