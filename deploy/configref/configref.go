// Package configref derives the configuration reference of every service
// from the services' own Config types: the flags their BindFlags registers
// (name, default, usage) and the environment variables their ApplyEnv
// reads. docs/operations.md carries the generated tables; the package's
// test fails when they are stale (`go test ./deploy/configref -update`
// rewrites them), when a flag's usage names an environment variable the
// service does not read, and when the deployment files (deploy/k8s,
// deploy/systemd) set a variable or flag the service does not know.
package configref

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/auditsvc"
	"github.com/agtpsuite/agtp/catalogsvc"
	"github.com/agtpsuite/agtp/frontdoor"
	"github.com/agtpsuite/agtp/identitysvc"
	"github.com/agtpsuite/agtp/policysvc"
	"github.com/agtpsuite/agtp/rcnssvc"
	"github.com/agtpsuite/agtp/services/command"
	"github.com/agtpsuite/agtp/services/kit"
)

// Services returns a fresh default configuration of every service, in the
// order of the README's table.
func Services() []Service {
	f, c, p, r, i, a := frontdoor.DefaultConfig(), catalogsvc.DefaultConfig(), policysvc.DefaultConfig(),
		rcnssvc.DefaultConfig(), identitysvc.DefaultConfig(), auditsvc.DefaultConfig()
	return []Service{
		{"frontdoor", &f}, {"catalogsvc", &c}, {"policysvc", &p},
		{"rcnssvc", &r}, {"identitysvc", &i}, {"auditsvc", &a},
	}
}

// Service is one service's name and configuration.
type Service struct {
	Name   string
	Config command.Config
}

// Setting is one flag or environment variable.
type Setting struct {
	Flag    string // without the dash; "" for an environment-only setting
	Env     string // "" when no environment variable sets it
	Default string
	Usage   string
}

// Reference is what a configuration reads.
type Reference struct {
	Settings []Setting
	// Env is every environment variable ApplyEnv looks up.
	Env []string
	// Problems are inconsistencies between usage texts and ApplyEnv.
	Problems []string
}

var envInUsage = regexp.MustCompile(`\s*\(env ([A-Z][A-Z0-9_]*)[^)]*\)`)

// Read binds cfg's flags on a fresh FlagSet and records the variables its
// ApplyEnv looks up (with an empty environment, so defaults stay).
func Read(cfg command.Config) Reference {
	var ref Reference
	seen := map[string]bool{}
	_ = cfg.ApplyEnv(func(k string) (string, bool) {
		if !seen[k] {
			seen[k] = true
			ref.Env = append(ref.Env, k)
		}
		return "", false
	})
	slices.Sort(ref.Env)
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	cfg.BindFlags(fs)
	named := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		s := Setting{Flag: f.Name, Default: f.DefValue, Usage: f.Usage}
		if m := envInUsage.FindStringSubmatch(f.Usage); m != nil {
			s.Env = m[1]
			s.Usage = strings.TrimSpace(envInUsage.ReplaceAllString(f.Usage, ""))
			named[s.Env] = true
			if !seen[s.Env] {
				ref.Problems = append(ref.Problems, fmt.Sprintf("flag -%s says (env %s), but ApplyEnv does not read %s", f.Name, s.Env, s.Env))
			}
		}
		ref.Settings = append(ref.Settings, s)
	})
	for _, e := range ref.Env {
		if named[e] {
			continue
		}
		// A flag whose usage forgot to name its variable, when the name
		// is the flag's (AGTP_INSPECT_ACL for -inspect-acl).
		if i := slices.IndexFunc(ref.Settings, func(s Setting) bool {
			return s.Flag != "" && s.Env == "" && "AGTP_"+strings.ToUpper(strings.ReplaceAll(s.Flag, "-", "_")) == e
		}); i >= 0 {
			ref.Settings[i].Env = e
			continue
		}
		ref.Settings = append(ref.Settings, Setting{Env: e, Usage: envOnlyUsage[e]})
	}
	return ref
}

// envOnlyUsage explains the variables no flag's usage names.
var envOnlyUsage = map[string]string{
	"OTEL_EXPORTER_OTLP_ENDPOINT":        "turns on OTLP/gRPC export of traces and metrics; the exporters read the other standard OTEL_EXPORTER_OTLP_* variables themselves",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "like OTEL_EXPORTER_OTLP_ENDPOINT, for traces",
	"AGTP_OPERATOR_FINGERPRINTS":         "comma-separated SHA-256 fingerprints (hex) of the raw Ed25519 keys of operator client certificates",
}

// Common is the reference of the settings every service shares.
func Common() Reference {
	c := kit.DefaultCommon("", "", "")
	return Read(&c)
}

// perServiceDefault marks a shared flag whose default some service sets.
const perServiceDefault = "per service"

// Markdown renders the reference tables of every service.
func Markdown() (string, []string) {
	var b strings.Builder
	var problems []string
	common := Common()
	commonDefault := map[string]string{}
	commonFlag := map[string]bool{}
	commonEnv := map[string]bool{}
	for _, s := range common.Settings {
		commonFlag[s.Flag] = s.Flag != ""
		commonDefault[s.Flag] = s.Default
		if s.Env != "" {
			commonEnv[s.Env] = true
		}
	}
	for _, e := range common.Env {
		commonEnv[e] = true
	}
	refs := map[string]Reference{}
	perService := map[string]bool{}
	for _, svc := range Services() {
		refs[svc.Name] = Read(svc.Config)
		for _, s := range refs[svc.Name].Settings {
			if commonFlag[s.Flag] && s.Default != commonDefault[s.Flag] {
				perService[s.Flag] = true
			}
		}
	}
	shared := slices.Clone(common.Settings)
	for i, s := range shared {
		if perService[s.Flag] {
			shared[i].Default = perServiceDefault
		}
	}
	b.WriteString("### Every service\n\n")
	table(&b, shared)
	for _, svc := range Services() {
		ref := refs[svc.Name]
		for _, p := range ref.Problems {
			problems = append(problems, svc.Name+": "+p)
		}
		var own []Setting
		for _, s := range ref.Settings {
			switch {
			case s.Flag != "" && commonFlag[s.Flag]:
				if s.Default != commonDefault[s.Flag] {
					own = append(own, s)
				}
			case s.Flag == "" && commonEnv[s.Env]:
			default:
				own = append(own, s)
			}
		}
		fmt.Fprintf(&b, "\n### %s\n\n", svc.Name)
		if len(own) == 0 {
			b.WriteString("Only the settings every service has.\n")
			continue
		}
		b.WriteString("Its own settings, and the shared ones whose default differs:\n\n")
		table(&b, own)
	}
	return b.String(), problems
}

func table(b *strings.Builder, settings []Setting) {
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, s := range settings {
		fl, env, def := "—", "—", "—"
		if s.Flag != "" {
			fl = "`-" + s.Flag + "`"
			switch s.Default {
			case "":
				def = "empty"
			case perServiceDefault:
				def = s.Default
			default:
				def = "`" + s.Default + "`"
			}
		}
		if s.Env != "" {
			env = "`" + s.Env + "`"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", fl, env, def, strings.ReplaceAll(s.Usage, "|", `\|`))
	}
}

// KnownEnv is every variable a service reads (its own and the shared ones).
func KnownEnv(svc Service) map[string]bool {
	m := map[string]bool{}
	for _, e := range Read(svc.Config).Env {
		m[e] = true
	}
	return m
}

// KnownFlags is every flag a service accepts.
func KnownFlags(svc Service) map[string]bool {
	m := map[string]bool{}
	for _, s := range Read(svc.Config).Settings {
		if s.Flag != "" {
			m[s.Flag] = true
		}
	}
	return m
}
