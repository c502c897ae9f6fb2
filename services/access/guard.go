package access

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Rule says which identities may call one RPC. The zero Rule allows no
// one.
type Rule struct {
	// Services are the suite services that may call it, by name.
	Services []string
	// Operators lets every operator identity call it.
	Operators bool
	// Systems lets every internal-system identity call it.
	Systems bool
	// AnyPeer lets every peer the handshake verified call it, identity
	// or not; only for health checks, which reveal nothing.
	AnyPeer bool
}

// Allows reports whether id may call an RPC under r.
func (r Rule) Allows(id Identity) bool {
	switch {
	case r.AnyPeer:
		return true
	case id.Kind == Service:
		return slices.Contains(r.Services, id.Name)
	case id.Kind == Operator:
		return r.Operators
	case id.Kind == System:
		return r.Systems
	}
	return false
}

// Table maps full gRPC method names ("/package.Service/Method") to who
// may call them. A method missing from the table is refused.
type Table map[string]Rule

// Infrastructure is the rule set every server carries besides its own
// services: health to every verified peer (probes and load balancers
// need no identity), reflection to operators (it is off unless enabled).
func Infrastructure() Table {
	health := Rule{AnyPeer: true}
	reflection := Rule{Operators: true}
	return Table{
		healthpb.Health_Check_FullMethodName:                                   health,
		healthpb.Health_Watch_FullMethodName:                                   health,
		healthpb.Health_List_FullMethodName:                                    health,
		reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      reflection,
		reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: reflection,
	}
}

// ReasonNotPermitted is the ErrorInfo reason of a refused call.
const ReasonNotPermitted = "not-permitted"

// The metadata the REST gateway sets on the calls it proxies. The token
// is a secret of this process, so only this process's own gateway can
// speak for an HTTP client; anything else sending these keys is ignored.
const (
	gatewayTokenKey  = "agtp-gateway-token"
	gatewayCallerKey = "agtp-gateway-caller"
)

// Guard enforces the access tables of one gRPC server and its gateway.
type Guard struct {
	rec   *Recognizer
	log   *slog.Logger
	token string
	// last is the identity of the most recent peer certificate: the
	// certificate of a connection is one value for all its calls, and a
	// service has few peers, so most calls skip reading its names again.
	last atomic.Pointer[certIdentity]

	mu    sync.RWMutex
	table Table
}

type certIdentity struct {
	cert *x509.Certificate
	id   Identity
}

// identify is rec.Identify, remembered for the last certificate.
func (g *Guard) identify(cert *x509.Certificate) Identity {
	if l := g.last.Load(); l != nil && l.cert == cert {
		return l.id
	}
	id := g.rec.Identify(cert)
	g.last.Store(&certIdentity{cert: cert, id: id})
	return id
}

// NewGuard starts with the Infrastructure rules; services add their
// tables with Add before the server serves.
func NewGuard(rec *Recognizer, log *slog.Logger) (*Guard, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("gateway token: %w", err)
	}
	return &Guard{rec: rec, log: log, token: hex.EncodeToString(b), table: Infrastructure()}, nil
}

// Recognizer is the guard's identity recogniser.
func (g *Guard) Recognizer() *Recognizer { return g.rec }

// Add merges a service's table. A method already present is a programming
// error: two rules for one RPC would leave the effective one to chance.
func (g *Guard) Add(t Table) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for m, r := range t {
		if _, dup := g.table[m]; dup {
			return fmt.Errorf("access: %s has two rules", m)
		}
		g.table[m] = r
	}
	return nil
}

// Rule returns the rule of a method and whether the table has one.
func (g *Guard) Rule(method string) (Rule, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	r, ok := g.table[method]
	return r, ok
}

type callerKey struct{}

// Caller is the identity the guard admitted the current RPC for: the
// certificate holder, or for a call through the REST gateway the HTTP
// client. Handlers read facts about the caller from here, never from the
// request.
func Caller(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(callerKey{}).(Identity)
	return id, ok
}

// WithCaller is the context an admitted call runs with; tests of handlers
// use it to call them as a given identity.
func WithCaller(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// admit decides one call, returning the context the handler runs with.
func (g *Guard) admit(ctx context.Context, method string) (context.Context, error) {
	id, via := g.caller(ctx)
	rule, ok := g.Rule(method)
	if ok && rule.Allows(id) {
		return WithCaller(ctx, id), nil
	}
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	g.log.WarnContext(ctx, "call refused by the access table", "method", method, "identity", id.String(), "via", via, "peer", addr)
	return nil, grpcerr.PermissionDenied(ReasonNotPermitted,
		fmt.Sprintf("%s may not call %s (docs/access.md lists who may)", id, method),
		"identity", id.String(), "method", method)
}

// caller reads the identity of the peer, or of the HTTP client when the
// call comes from this process's own gateway.
func (g *Guard) caller(ctx context.Context) (Identity, string) {
	cert := verifiedPeer(ctx)
	if cert == nil {
		return Identity{}, "grpc"
	}
	// Two key lookups rather than FromIncomingContext, which copies the
	// whole metadata on every call.
	if tokens := metadata.ValueFromIncomingContext(ctx, gatewayTokenKey); tokens != nil {
		if len(tokens) == 1 && subtle.ConstantTimeCompare([]byte(tokens[0]), []byte(g.token)) == 1 {
			callers := metadata.ValueFromIncomingContext(ctx, gatewayCallerKey)
			if len(callers) != 1 {
				return Identity{}, "gateway"
			}
			id, err := ParseIdentity(callers[0])
			if err != nil {
				return Identity{}, "gateway"
			}
			return id, "gateway"
		}
	}
	return g.identify(cert), "grpc"
}

// verifiedPeer is the leaf of the chain the TLS handshake verified.
func verifiedPeer(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// UnaryInterceptor enforces the table on unary RPCs.
func (g *Guard) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := g.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor enforces the table on streaming RPCs.
func (g *Guard) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := g.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &admittedStream{ServerStream: ss, ctx: ctx})
	}
}

type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *admittedStream) Context() context.Context { return s.ctx }

// GatewayOptions make a grpc-gateway mux forward the HTTP client's
// identity, as its verified certificate names it, to the gRPC server of
// this guard, and drop any header that tries to set the forwarding
// metadata itself.
func (g *Guard) GatewayOptions() []runtime.ServeMuxOption {
	return []runtime.ServeMuxOption{
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			// The gateway's own forwarding and the console's person are
			// never taken from an HTTP client's headers.
			if k := strings.ToLower(key); strings.HasPrefix(k, strings.ToLower(runtime.MetadataHeaderPrefix)+"agtp-gateway-") ||
				k == strings.ToLower(runtime.MetadataHeaderPrefix)+personKey {
				return "", false
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
		runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
			return metadata.Pairs(gatewayTokenKey, g.token, gatewayCallerKey, g.rec.IdentifyRequest(r).String())
		}),
	}
}
