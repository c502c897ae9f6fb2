package testkit

// The stubs of stubs_gen.go stand in for the suite's internal gRPC
// services (policysvc and its task service, auditsvc, catalogsvc,
// identitysvc, rcnssvc) where a test needs a peer that answers as the test
// says, or misbehaves on purpose: the behaviour is set inline in function
// fields, every method left unset answers Unimplemented, and Serve puts
// the stub on a real gRPC server on loopback (grpc-go's
// internal/stubserver). Where the real service can run in the test, run
// it instead.
//
//go:generate go run ./internal/stubgen stubs_gen.go
