package suite

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/catalogsvc"
	"github.com/agtpsuite/agtp/frontdoor"
	"github.com/agtpsuite/agtp/identitysvc"
	"github.com/agtpsuite/agtp/policysvc"
	"github.com/agtpsuite/agtp/rcnssvc"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/outbound"
)

// services are the configurations of the suite's six services.
type services struct {
	audit    auditsvc.Config
	catalog  catalogsvc.Config
	identity identitysvc.Config
	policy   policysvc.Config
	rcns     rcnssvc.Config
	front    frontdoor.Config
}

// service is one member's configuration as the command layer sees it.
type service struct {
	name string
	env  interface {
		ApplyEnv(func(string) (string, bool)) error
	}
	common *kit.Common
}

// each lists the services in the order the suite starts them.
func (v *services) each() []service {
	return []service{
		{"auditsvc", &v.audit, &v.audit.Common},
		{"catalogsvc", &v.catalog, &v.catalog.Common},
		{"identitysvc", &v.identity, &v.identity.Common},
		{"policysvc", &v.policy, &v.policy.Common},
		{"rcnssvc", &v.rcns, &v.rcns.Common},
		{"frontdoor", &v.front, &v.front.Common},
	}
}

// value is one service's configuration for comparison: the front door's
// LookupEnv is a function, which no two configurations share.
func (v services) value(name string) any {
	switch name {
	case "auditsvc":
		return v.audit
	case "catalogsvc":
		return v.catalog
	case "identitysvc":
		return v.identity
	case "policysvc":
		return v.policy
	case "rcnssvc":
		return v.rcns
	}
	f := v.front
	f.LookupEnv = nil
	return f
}

// differ names the services whose configuration differs between v and w.
func (v services) differ(w services) []string {
	var names []string
	for _, m := range v.each() {
		if !reflect.DeepEqual(v.value(m.name), w.value(m.name)) {
			names = append(names, m.name)
		}
	}
	return names
}

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// defaultServices are the services' own defaults, as their binaries have
// them.
func defaultServices() services {
	return services{
		audit:    auditsvc.DefaultConfig(),
		catalog:  catalogsvc.DefaultConfig(),
		identity: identitysvc.DefaultConfig(),
		policy:   policysvc.DefaultConfig(),
		rcns:     rcnssvc.DefaultConfig(),
		front:    frontdoor.DefaultConfig(),
	}
}

// order is the order of configure's layers.
type order int

const (
	// envFirst is how the suite runs: the environment, then the suite's
	// own settings.
	envFirst order = iota
	// envLast applies the environment over the suite's own settings; the
	// environment report uses it to find the variables the suite ignores.
	envLast
)

// configure builds the services' configurations as make run runs them, in
// three layers:
//
//  1. each service's DefaultConfig, with the suite's defaults for a
//     development suite on loopback: the demo merchant's policy options
//     (AGTP_POLICY_FILE replaces them), loopback-only outbound
//     destinations (AGTP_OUTBOUND_* replace them) and the open AGP
//     execute policy (AGTP_AGP_EXECUTE_POLICY replaces it);
//  2. the environment, read by each service's ApplyEnv, the code the
//     service's own binary reads it with;
//  3. the settings the suite owns, which the environment cannot change
//     (the package documentation lists them).
//
// The Redis URL stays empty when neither cfg nor the environment gives
// one; New then embeds a Redis.
func configure(cfg Config, l devpki.Layout, lookup func(string) (string, bool), o order) (services, error) {
	v := defaultServices()
	// Layer 1. Callers may name loopback webhooks and AGTP hosts (listed
	// exactly, so the address check lets them through) and nothing else
	// (docs/mechanics.md, "Outbound destinations").
	dest := outbound.Options{
		Webhooks: []string{"https://127.0.0.1:*", "https://localhost:*", "https://[::1]:*"},
		Peers:    []string{"127.0.0.1:*", "localhost:*", "[::1]:*"},
	}
	// The services serve their metrics on their admin listeners, for the
	// operator console's health page (AGTP_PROMETHEUS=off turns it off).
	for _, m := range v.each() {
		m.common.Telemetry.Prometheus = true
	}
	v.policy.Tasks.Outbound = dest
	// The walkthrough's AGP executes send no confirmation token; policysvc
	// warns at start-up that the policy is open (AGTP_AGP_EXECUTE_POLICY
	// replaces it).
	v.policy.AGP.ExecutePolicy = "open"
	v.front.Outbound = outbound.Options{Webhooks: slices.Clone(dest.Webhooks), Peers: slices.Clone(dest.Peers)}
	if err := demoCommerce(&v.policy, demoMerchantPath(l.Dir)); err != nil {
		return services{}, err
	}
	if o == envFirst {
		if err := v.applyEnv(lookup); err != nil {
			return services{}, err
		}
	}
	v.own(cfg, l)
	if o == envLast {
		if err := v.applyEnv(lookup); err != nil {
			return services{}, err
		}
	}
	return v, nil
}

// applyEnv is layer 2: every service reads the environment.
func (v *services) applyEnv(lookup func(string) (string, bool)) error {
	for _, m := range v.each() {
		if err := m.env.ApplyEnv(lookup); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

// own is layer 3: the settings the suite sets itself.
func (v *services) own(cfg Config, l devpki.Layout) {
	// What one process of six services needs, and the state directory's
	// PKI.
	defaults := defaultServices()
	defs := defaults.each()
	for i, m := range v.each() {
		c, def := m.common, defs[i].common
		// Six services share the environment, so GRPC_ADDR and HTTP_ADDR
		// would give them one address; each keeps its own.
		c.GRPCAddr, c.HTTPAddr = def.GRPCAddr, def.HTTPAddr
		if c.Telemetry.Prometheus && c.HTTPAddr == "" {
			// The front door has no gateway; with AGTP_PROMETHEUS its
			// metrics need an admin listener all the same.
			c.HTTPAddr = adminAddr(c.GRPCAddr)
		}
		if cfg.Listen != nil {
			c.GRPCAddr = cfg.Listen(c.Name, "grpc")
			if c.HTTPAddr != "" {
				c.HTTPAddr = cfg.Listen(c.Name, "http")
			}
		}
		// The profiles of net/http/pprof cover the whole process: one
		// listener serves them, the front door's.
		if m.name != "frontdoor" {
			c.PprofAddr = ""
		}
		c.CAFile, c.CertFile, c.KeyFile = l.CA(), l.Cert(c.Name), l.Key(c.Name)
		c.SigningKeyFile = l.SigningKey()
		// The state directory's certificates name identities in the
		// default trust domain.
		c.TrustDomain = def.TrustDomain
		if cfg.RedisURL != "" {
			c.RedisURL = cfg.RedisURL
		}
		if cfg.LogLevel != "" {
			c.LogLevel = cfg.LogLevel
		}
		if cfg.LogFormat != "" {
			c.LogFormat = cfg.LogFormat
		}
		c.Telemetry.OTLPExport = c.Telemetry.OTLPExport || cfg.Telemetry.OTLPExport
		c.Telemetry.SpanProcessors = cfg.Telemetry.SpanProcessors
	}
	peers := map[string]string{}
	for _, m := range v.each() {
		if m.name != "frontdoor" {
			peers[m.name] = m.common.GRPCAddr
		}
	}
	for _, m := range v.each() {
		m.common.Peers = maps.Clone(peers)
	}
	v.catalog.Options.DemoEndpoints = true
	v.rcns.Demo = true
	v.identity.AgentCACertFile, v.identity.AgentCAKeyFile = l.AgentCA(), l.AgentCAKey()
	// NOTIFY deliveries to other suites present the AGTP server
	// certificate, as the front door's DELEGATE hops do.
	v.policy.Tasks.ClientCertFile, v.policy.Tasks.ClientKeyFile = l.Cert(devpki.AGTPServer), l.Key(devpki.AGTPServer)
	v.front.ServerCertFile, v.front.ServerKeyFile = l.Cert(devpki.AGTPServer), l.Key(devpki.AGTPServer)
	v.front.UpstreamCAFile = l.CA()
	v.front.AgentCAFile = l.AgentCA()
	// make run serves the demo domain, which the front door binary does
	// not unless asked.
	v.front.Demo = true
	if cfg.Listen != nil {
		v.front.AGTPAddr = cfg.Listen(v.front.Name, "agtp")
		v.front.HTTPSAddr = cfg.Listen(v.front.Name, "https")
	}
}

// envSetting is a variable of the environment that a service read.
type envSetting struct {
	name, value string
	// services are those whose configuration the variable changed; none
	// when the suite sets the setting itself (overridden).
	services   []string
	overridden bool
}

// environmentReport lists the variables of the environment the services
// read that change their configuration, and those the suite ignores
// because it sets the setting itself. Each variable is tried alone,
// against the configuration built from no environment at all; one that
// changes nothing, even over the suite's own settings, is equal to the
// default and in neither list.
func environmentReport(cfg Config, l devpki.Layout, lookup func(string) (string, bool)) ([]envSetting, error) {
	var names []string
	record := func(k string) (string, bool) {
		v, ok := lookup(k)
		if ok && !slices.Contains(names, k) {
			names = append(names, k)
		}
		return v, ok
	}
	if _, err := configure(cfg, l, record, envFirst); err != nil {
		return nil, err
	}
	slices.Sort(names)
	base, err := configure(cfg, l, noEnv, envFirst)
	if err != nil {
		return nil, err
	}
	var out []envSetting
	for _, name := range names {
		only := func(k string) (string, bool) {
			if k != name {
				return "", false
			}
			return lookup(k)
		}
		with, err := configure(cfg, l, only, envFirst)
		if err != nil {
			return nil, err
		}
		value, _ := lookup(name)
		s := envSetting{name: name, value: redact(value), services: with.differ(base)}
		if len(s.services) == 0 {
			over, err := configure(cfg, l, only, envLast)
			if err != nil {
				return nil, err
			}
			s.overridden = len(over.differ(base)) > 0
		}
		if len(s.services) > 0 || s.overridden {
			out = append(out, s)
		}
	}
	return out, nil
}

// redact hides the password of a URL (REDIS_URL may carry one).
func redact(v string) string {
	if u, err := url.Parse(v); err == nil && u.User != nil {
		return u.Redacted()
	}
	return v
}

// adminAddr is the front door's admin listener beside its gRPC address:
// the port 1006 above (7100 gives 8106, after the gateways' 8101 to 8105;
// 8100 is the operator console's).
func adminAddr(grpcAddr string) string {
	host, port, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "127.0.0.1:0"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n == 0 || n+1006 > 65535 {
		return net.JoinHostPort(host, "0")
	}
	return net.JoinHostPort(host, strconv.Itoa(n+1006))
}
