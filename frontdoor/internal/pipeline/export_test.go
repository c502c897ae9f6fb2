package pipeline

import (
	"sync/atomic"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
)

// CountContractCompiles gives p an empty contract endpoint cache that
// counts its compilations.
func CountContractCompiles(p *Pipeline) *atomic.Int32 {
	var n atomic.Int32
	p.contracts = newContractCache(func(def []byte) (*endpoint.Endpoint, error) { n.Add(1); return endpoint.FromJSON(def) })
	return &n
}
