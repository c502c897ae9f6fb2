package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/internal/builtin"
	"github.com/agtpsuite/agtp/catalogsvc/internal/manifest"
	"github.com/agtpsuite/agtp/catalogsvc/internal/registry"
	"github.com/agtpsuite/agtp/catalogsvc/internal/store"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/paging"
)

// Request bounds (the admin API is operator-facing, but still bounded).
const (
	maxDefinitionBytes = endpoint.MaxDocumentSize
	maxMethodLen       = 64
	maxPathLen         = 8 << 10
)

// Reason tokens of this service's errors.
const (
	ReasonEndpointInvalid   = "endpoint-invalid"
	ReasonEndpointConflict  = "endpoint-conflict"
	ReasonEndpointNotFound  = "endpoint-not-found"
	ReasonBuiltinEndpoint   = "builtin-endpoint"
	ReasonTierReserved      = "tier-reserved"
	ReasonAdminUnavailable  = "admin-store-unavailable"
	ReasonRequestTooLarge   = "request-too-large"
	ReasonCatalogNotLoaded  = "catalog-not-loaded"
	ReasonCategoryUnknown   = "category-unknown"
	ReasonInvalidRouteInput = "route-input-invalid"
)

func (s *Server) current() (*registry.State, error) {
	st := s.state.Load()
	if st == nil {
		return nil, grpcerr.Unavailable(ReasonCatalogNotLoaded, "the catalog has no configuration yet")
	}
	return st, nil
}

// GetSnapshot returns the current snapshot.
func (s *Server) GetSnapshot(context.Context, *catalogv1.GetSnapshotRequest) (*catalogv1.GetSnapshotResponse, error) {
	st, err := s.current()
	if err != nil {
		return nil, err
	}
	return &catalogv1.GetSnapshotResponse{Snapshot: st.Snapshot}, nil
}

// WatchSnapshot sends the current snapshot (unless the watcher already
// has that revision) and then every new one. A slow watcher gets the
// newest snapshot when it is ready again, skipping the ones in between.
func (s *Server) WatchSnapshot(req *catalogv1.WatchSnapshotRequest, stream grpc.ServerStreamingServer[catalogv1.WatchSnapshotResponse]) error {
	ch := s.addWatcher()
	defer s.removeWatcher(ch)
	sent := req.GetKnownRevision()
	for {
		if st := s.state.Load(); st != nil && st.Snapshot.GetRevision() != sent {
			if err := stream.Send(&catalogv1.WatchSnapshotResponse{Snapshot: st.Snapshot}); err != nil {
				return err
			}
			sent = st.Snapshot.GetRevision()
		}
		select {
		case <-stream.Context().Done():
			return grpcerr.FromContext(stream.Context().Err())
		case <-ch:
		}
	}
}

// ResolveRoute makes the structural decision with the same route table
// the front door builds from the snapshot.
func (s *Server) ResolveRoute(_ context.Context, req *catalogv1.ResolveRouteRequest) (*catalogv1.ResolveRouteResponse, error) {
	if len(req.GetMethod()) > maxMethodLen || len(req.GetPath()) > maxPathLen {
		return nil, grpcerr.InvalidArgument(ReasonInvalidRouteInput, "method or path too long")
	}
	st, err := s.current()
	if err != nil {
		return nil, err
	}
	d := st.Table.Decide(req.GetMethod(), req.GetPath())
	return DecisionProto(&d), nil
}

// DecisionProto converts a decision into the ResolveRoute response.
func DecisionProto(d *route.Decision) *catalogv1.ResolveRouteResponse {
	resp := &catalogv1.ResolveRouteResponse{
		Outcome:               d.Outcome.Proto(),
		EffectiveMethod:       d.Method,
		CatalogWarning:        d.CatalogWarning,
		EndpointWarning:       d.EndpointWarning,
		Segment:               d.Segment,
		AllowedMethodsForPath: d.AllowedMethods,
		RedirectsForPath:      d.Redirects,
		CatalogVersion:        d.CatalogVersion,
	}
	if d.RequestedMethod != d.Method {
		resp.RequestedMethod = d.RequestedMethod
	}
	if d.Endpoint != nil {
		resp.Endpoint = d.Endpoint.Proto
		resp.PathParams = make(map[string]string, len(d.Params()))
		for _, p := range d.Params() {
			resp.PathParams[p.Name] = p.Value
		}
	}
	return resp
}

// GetManifest returns the signed manifest.
func (s *Server) GetManifest(context.Context, *catalogv1.GetManifestRequest) (*catalogv1.GetManifestResponse, error) {
	st, err := s.current()
	if err != nil {
		return nil, err
	}
	return &catalogv1.GetManifestResponse{
		ContentType: manifest.MediaType,
		//lint:ignore SA1019 the first release's field, filled for its clients beside Manifest
		ManifestJson:    st.Manifest,
		Manifest:        string(st.Manifest),
		ApiVersion:      st.Snapshot.GetApiVersion(),
		Etag:            st.ETag,
		DocumentVersion: st.Snapshot.GetDocumentVersion(),
	}, nil
}

// methodPaging is ListMethods' page sizes.
var methodPaging = paging.Spec{RPC: catalogv1.CatalogService_ListMethods_FullMethodName, Default: 100, Max: 1000}

// ListMethods lists the admitted verbs (catalog, floor and custom) by
// name, a page at a time. The verbs live in the in-memory snapshot; the
// position is the last name returned, so a page of a newer snapshot goes
// on after it without repeats.
func (s *Server) ListMethods(_ context.Context, req *catalogv1.ListMethodsRequest) (*catalogv1.ListMethodsResponse, error) {
	cat := req.GetCategory()
	page, err := methodPaging.Parse(req.GetPageSize(), req.GetPageToken(), cat)
	if err != nil {
		return nil, err
	}
	st, err := s.current()
	if err != nil {
		return nil, err
	}
	if cat != "" && !slices.Contains(endpoint.Capabilities, cat) {
		return nil, grpcerr.InvalidArgument(ReasonCategoryUnknown, fmt.Sprintf("category %q is not in the taxonomy", cat))
	}
	var ms []*catalogv1.Method
	for _, m := range st.Snapshot.GetMethods() {
		if cat == "" || slices.Contains(m.GetCategories(), cat) {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b *catalogv1.Method) int { return strings.Compare(a.GetName(), b.GetName()) })
	resp := &catalogv1.ListMethodsResponse{CatalogVersion: st.Snapshot.GetCatalogVersion()}
	resp.Methods, resp.NextPageToken = paging.Slice(page, ms, (*catalogv1.Method).GetName)
	return resp, nil
}

// PutEndpoint validates a definition exactly as a file would be, checks
// that the whole configuration still holds with it (no ambiguity, no
// vocabulary break), stores it in Redis, tells the other replicas and
// publishes the new configuration.
func (s *Server) PutEndpoint(ctx context.Context, req *catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
	if s.store == nil {
		return nil, grpcerr.Unavailable(ReasonAdminUnavailable, "runtime endpoints need Redis")
	}
	def, err := definition(req)
	if err != nil {
		return nil, err
	}
	tier := req.GetTier()
	switch tier {
	case catalogv1.EndpointTier_ENDPOINT_TIER_UNSPECIFIED:
		tier = catalogv1.EndpointTier_ENDPOINT_TIER_B
	case catalogv1.EndpointTier_ENDPOINT_TIER_B, catalogv1.EndpointTier_ENDPOINT_TIER_C:
	default:
		return nil, grpcerr.InvalidArgument(ReasonTierReserved, "tier A is protocol-native and cannot be registered")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.current()
	if err != nil {
		return nil, err
	}
	ep, err := registry.CompileRuntime(st.Draft.Context(), def)
	if err != nil {
		return nil, grpcerr.InvalidArgument(ReasonEndpointInvalid, err.Error())
	}
	key := ep.Def.Key()
	if st.Draft.Origin(key) == "built-in" {
		return nil, grpcerr.FailedPrecondition(ReasonBuiltinEndpoint, key+" is a built-in endpoint")
	}
	entry := registry.Runtime{Key: key, Tier: tier, Definition: ep.JSON}
	if err := s.rebuildLocked(ctx, "dry run", &entry); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			return nil, grpcerr.FailedPrecondition(ReasonEndpointConflict, ce.Err.Error())
		}
		return nil, grpcerr.Internal(err)
	}
	if err := s.store.Put(ctx, entry); err != nil {
		return nil, s.storeError(err)
	}
	if err := s.rebuildLocked(ctx, "put "+key, nil); err != nil {
		return nil, grpcerr.Internal(err)
	}
	st = s.state.Load()
	resp := &catalogv1.PutEndpointResponse{Revision: st.Snapshot.GetRevision(), ApiVersion: st.Snapshot.GetApiVersion()}
	if e := st.Table.Endpoint(ep.Def.Method, ep.Def.Path); e != nil {
		resp.Endpoint = e.Proto
	}
	return resp, nil
}

// DeleteEndpoint removes a runtime endpoint, or hides a file endpoint
// behind a tombstone until it is registered again.
func (s *Server) DeleteEndpoint(ctx context.Context, req *catalogv1.DeleteEndpointRequest) (*catalogv1.DeleteEndpointResponse, error) {
	if s.store == nil {
		return nil, grpcerr.Unavailable(ReasonAdminUnavailable, "runtime endpoints need Redis")
	}
	if len(req.GetMethod()) > maxMethodLen || len(req.GetPath()) > maxPathLen {
		return nil, grpcerr.InvalidArgument(ReasonInvalidRouteInput, "method or path too long")
	}
	key := req.GetMethod() + " " + req.GetPath()
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.current()
	if err != nil {
		return nil, err
	}
	switch st.Draft.Origin(key) {
	case "":
		return nil, grpcerr.NotFound(ReasonEndpointNotFound, "no endpoint "+key)
	case "built-in":
		return nil, grpcerr.FailedPrecondition(ReasonBuiltinEndpoint, key+" is a built-in endpoint")
	}
	if req.GetMethod() == agtp.MethodDiscover && slices.Contains(builtin.Paths, req.GetPath()) {
		return nil, grpcerr.FailedPrecondition(ReasonBuiltinEndpoint, key+" overrides a built-in; change the override file instead")
	}
	if st.Draft.IsBase(key) {
		err = s.store.Put(ctx, registry.Runtime{Key: key, Deleted: true})
	} else {
		err = s.store.Remove(ctx, key)
	}
	if err != nil {
		return nil, s.storeError(err)
	}
	if err := s.rebuildLocked(ctx, "delete "+key, nil); err != nil {
		return nil, grpcerr.Internal(err)
	}
	st = s.state.Load()
	return &catalogv1.DeleteEndpointResponse{Revision: st.Snapshot.GetRevision(), ApiVersion: st.Snapshot.GetApiVersion()}, nil
}

// storeError is the answer to a failed runtime endpoint write: the
// store's limit is the operator's to resolve (delete runtime endpoints),
// anything else is internal.
func (s *Server) storeError(err error) error {
	if errors.Is(err, store.ErrFull) {
		return grpcerr.FailedPrecondition(ReasonEndpointConflict,
			fmt.Sprintf("the runtime endpoint limit (%d, tombstones included) is reached; delete a runtime endpoint first", s.store.MaxEndpoints()))
	}
	return grpcerr.Internal(err)
}

// definition is PutEndpoint's document: definition when set, else the
// first release's definition_json, at most maxDefinitionBytes of JSON
// either way.
func definition(req *catalogv1.PutEndpointRequest) ([]byte, error) {
	//lint:ignore SA1019 the first release's clients send only definition_json
	old := req.GetDefinitionJson()
	if len(old) > maxDefinitionBytes {
		return nil, grpcerr.InvalidArgument(ReasonRequestTooLarge, fmt.Sprintf("definition_json is larger than %d bytes", maxDefinitionBytes))
	}
	b, err := jsondoc.PreferStruct(req.GetDefinition(), old)
	if err != nil {
		return nil, grpcerr.InvalidArgument(ReasonEndpointInvalid, err.Error())
	}
	if len(b) > maxDefinitionBytes {
		return nil, grpcerr.InvalidArgument(ReasonRequestTooLarge, fmt.Sprintf("definition is larger than %d bytes of JSON", maxDefinitionBytes))
	}
	return b, nil
}
