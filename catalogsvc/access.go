package catalogsvc

import (
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/access"
)

// Access is who may call each CatalogService RPC (docs/access.md). The
// front door and rcnssvc follow the catalog; only operators and rcnssvc
// (installing a negotiated contract's endpoint) change endpoints, because
// an endpoint decides where agent requests and their secrets go.
func Access() access.Table {
	read := access.Rule{Services: []string{"frontdoor", "rcnssvc"}, Operators: true, Systems: true}
	write := access.Rule{Services: []string{"rcnssvc"}, Operators: true}
	return access.Table{
		catalogv1.CatalogService_GetSnapshot_FullMethodName:    read,
		catalogv1.CatalogService_WatchSnapshot_FullMethodName:  {Services: []string{"frontdoor", "rcnssvc"}, Operators: true},
		catalogv1.CatalogService_ResolveRoute_FullMethodName:   read,
		catalogv1.CatalogService_GetManifest_FullMethodName:    read,
		catalogv1.CatalogService_ListMethods_FullMethodName:    read,
		catalogv1.CatalogService_PutEndpoint_FullMethodName:    write,
		catalogv1.CatalogService_DeleteEndpoint_FullMethodName: write,
	}
}
