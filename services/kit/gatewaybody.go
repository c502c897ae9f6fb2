package kit

import (
	"fmt"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

// maxMessageBytes is the largest request a service takes, over gRPC and
// through its REST gateway alike.
const maxMessageBytes = 8 << 20

// ReasonBodyTooLarge answers a REST request whose body is larger than a
// service takes.
const ReasonBodyTooLarge = "body-too-large"

// limitGatewayBodies caps what the REST gateway reads of a request body at
// maxMessageBytes. The gateway decodes the whole body before the call
// reaches the gRPC server, and so before the access check, so without the
// cap any holder of a suite certificate could make a service buffer a
// body of any size. A body announced larger is answered 413 before a
// byte of it is read; one that turns out larger (no Content-Length) is
// cut off at the cap, and the gateway answers 400.
func limitGatewayBodies(mux *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxMessageBytes {
			_, out := runtime.MarshalerForRequest(mux, r)
			err := grpcerr.New(codes.ResourceExhausted, ReasonBodyTooLarge,
				fmt.Sprintf("a request body is at most %d bytes", maxMessageBytes))
			runtime.HTTPError(r.Context(), mux, out, w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: err})
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxMessageBytes)
		}
		mux.ServeHTTP(w, r)
	})
}
