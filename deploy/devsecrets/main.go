// Command devsecrets prints the Kubernetes Secrets the suite's manifests
// mount, made from a development PKI (services/devpki): one mTLS
// certificate per service, the front door's AGTP server certificate, an
// operator certificate (operator/admin), an internal system's certificate
// (system/reporting), the Ed25519 signing key and a Redis password with the
// matching REDIS_URL for deploy/k8s/redis-cluster.
//
//	go run ./deploy/devsecrets -namespace agtp-dev | kubectl apply -f -
//
// The PKI is kept in -dir, so running it again prints the same identities
// (delete the directory to start over). It is for development clusters:
// production certificates come from cert-manager or the organisation's PKI
// (deploy/k8s/README.md).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	var o Options
	flag.StringVar(&o.Namespace, "namespace", "agtp-dev", "namespace of the Secrets")
	flag.StringVar(&o.Dir, "dir", ".state/k8s-dev", "directory holding the development PKI (created if missing, reused if present)")
	flag.StringVar(&o.RedisURL, "redis-url", "", "REDIS_URL for the services (default: the in-namespace deploy/k8s/redis-cluster with the generated password)")
	flag.Parse()
	if err := run(os.Stdout, o); err != nil {
		fmt.Fprintf(os.Stderr, "devsecrets: %v\n", err)
		os.Exit(1)
	}
}

func run(w io.Writer, o Options) error {
	list, err := Make(o)
	if err != nil {
		return err
	}
	return Write(w, list)
}
