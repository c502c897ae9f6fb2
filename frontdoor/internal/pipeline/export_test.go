package pipeline

import (
	"sync/atomic"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// CountContractCompiles replaces the contract endpoint cache with an
// empty one that counts its compilations, until the test ends.
func CountContractCompiles(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	saved := contractEndpoints
	contractEndpoints = &endpointCache{maxEntries: contractCacheEntries, maxBytes: contractCacheBytes,
		compile: func(def []byte) (*endpoint.Endpoint, error) { n.Add(1); return endpoint.FromJSON(def) }}
	t.Cleanup(func() { contractEndpoints = saved })
	return &n
}
