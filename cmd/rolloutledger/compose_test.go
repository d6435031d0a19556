package main_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	composecli "github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/spf13/pflag"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/cli"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

const repoRoot = "../.."

// stackMode is one way the compose file is started (docs/operations.md).
type stackMode struct {
	name     string
	envFiles []string // as given to docker compose --env-file
	brokers  []string // the Kafka services it must run
}

var stackModes = []stackMode{
	{name: "single broker", brokers: []string{"kafka"}},
	{name: "three brokers", envFiles: []string{"deploy/three-brokers.env"}, brokers: []string{"kafka", "kafka-2", "kafka-3"}},
}

// loadCompose loads docker-compose.yml the way `docker compose` does (the
// same library): the file is validated against the Compose schema,
// interpolated from the env files, its profiles applied from
// COMPOSE_PROFILES, and checked for consistency (every service a
// depends_on names exists, every named volume is declared). The process
// environment is deliberately left out so the result does not depend on
// the machine.
func loadCompose(t *testing.T, m stackMode) *types.Project {
	t.Helper()
	var envFiles []string
	for _, f := range m.envFiles {
		envFiles = append(envFiles, filepath.Join(repoRoot, f))
	}
	opts, err := composecli.NewProjectOptions([]string{filepath.Join(repoRoot, "docker-compose.yml")},
		composecli.WithWorkingDirectory(repoRoot),
		composecli.WithEnvFiles(envFiles...),
		composecli.WithDotEnv,
		composecli.WithDefaultProfiles(),
		composecli.WithConsistency(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml (%s): %v", m.name, err)
	}
	return p
}

func env(s types.ServiceConfig, key string) string {
	if v, ok := s.Environment[key]; ok && v != nil {
		return *v
	}
	return ""
}

// No Docker engine runs where the tests do, so the stack is checked
// structurally, in every mode it is documented to start in.
func TestComposeFile(t *testing.T) {
	for _, m := range stackModes {
		t.Run(m.name, func(t *testing.T) {
			p := loadCompose(t, m)
			want := append([]string{"postgres", "migrate", "ingest", "projector", "projector-2", "pgsink", "gateway",
				"otel-collector", "jaeger", "prometheus", "grafana"}, m.brokers...)
			for _, name := range want {
				if _, ok := p.Services[name]; !ok {
					t.Errorf("service %s is not enabled", name)
				}
			}
			for _, name := range []string{"kafka-2", "kafka-3"} {
				if _, on := p.Services[name]; on != slices.Contains(m.brokers, name) {
					t.Errorf("service %s enabled = %v, want %v", name, on, !on)
				}
			}
			for name, s := range p.Services {
				checkService(t, p, name, s)
			}
			checkKafka(t, p, m)
		})
	}
}

// noHealthcheck are the long-running services without a container health
// check, and why.
var noHealthcheck = map[string]string{
	"otel-collector": "its image has no shell or HTTP client to probe with; Prometheus scrapes it instead",
}

func checkService(t *testing.T, p *types.Project, name string, s types.ServiceConfig) {
	t.Helper()
	if s.Image == "" {
		t.Errorf("service %s: no image (a built service names its image, so the others reuse it)", name)
	}
	oneShot := s.Restart == types.RestartPolicyNo
	hasHealth := s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 0
	if !oneShot && !hasHealth && noHealthcheck[name] == "" {
		t.Errorf("service %s runs for good but has no health check", name)
	}
	if !oneShot && s.Restart == "" {
		t.Errorf("service %s has no restart policy", name)
	}
	if !oneShot && (s.Deploy == nil || s.Deploy.Resources.Limits == nil || s.Deploy.Resources.Limits.MemoryBytes == 0) {
		t.Errorf("service %s has no memory limit", name)
	}
	for dep, d := range s.DependsOn {
		ds, ok := p.Services[dep]
		if !ok {
			t.Errorf("service %s depends on %s, which is not enabled", name, dep)
			continue
		}
		switch d.Condition {
		case types.ServiceConditionHealthy:
			if ds.HealthCheck == nil || ds.HealthCheck.Disable || len(ds.HealthCheck.Test) == 0 {
				t.Errorf("service %s waits for %s to be healthy, but %s has no health check", name, dep, dep)
			}
		case types.ServiceConditionCompletedSuccessfully:
			if ds.Restart != types.RestartPolicyNo {
				t.Errorf("service %s waits for %s to complete, but %s restarts (%q)", name, dep, dep, ds.Restart)
			}
		case types.ServiceConditionStarted:
		default:
			t.Errorf("service %s: depends_on %s with condition %q", name, dep, d.Condition)
		}
	}
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind {
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s mounts %s, which is not in the repository: %v", name, v.Source, err)
			}
		}
	}
	if s.Build != nil {
		if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("service %s builds from %s: %v", name, s.Build.Dockerfile, err)
		}
		checkLedgerCommand(t, p, name, s)
	}
}

// checkLedgerCommand runs every ledger command line of the compose file
// through this build's command line (with --help, so nothing starts) and
// checks the service set it asks for is one serve accepts.
func checkLedgerCommand(t *testing.T, p *types.Project, name string, s types.ServiceConfig) {
	t.Helper()
	args := []string(s.Command)
	if len(args) == 0 {
		t.Errorf("service %s: the image's default command; name the service's command", name)
		return
	}
	if code := cli.Main(append(slices.Clone(args), "--help"), io.Discard, io.Discard); code != 0 {
		t.Errorf("service %s: command %v is not accepted by rolloutledger (exit %d)", name, args, code)
	}
	if hc := s.HealthCheck; hc != nil && !hc.Disable {
		if len(hc.Test) < 2 || hc.Test[0] != "CMD" {
			t.Errorf("service %s: health check %v: the image has no shell, use CMD", name, hc.Test)
		} else if hc.Test[1] != "/usr/local/bin/rolloutledger" {
			t.Errorf("service %s: health check runs %s, not the ledger binary", name, hc.Test[1])
		} else if code := cli.Main(append(slices.Clone([]string(hc.Test[2:])), "--help"), io.Discard, io.Discard); code != 0 {
			t.Errorf("service %s: health check %v is not accepted by rolloutledger", name, hc.Test)
		}
	}
	if args[0] != "serve" {
		return
	}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	only := fs.String("only", "", "")
	addr := fs.String("addr", "", "")
	data := fs.String("data", "./.rolloutledger", "")
	brokers := fs.String("brokers", env(s, "KAFKA_BROKERS"), "")
	fs.Int("partitions", 12, "")
	upstreams := fs.StringSlice("upstream", nil, "")
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	if *addr != "0.0.0.0:7070" {
		t.Errorf("service %s listens on %q; Prometheus, the gateway and the health check expect 0.0.0.0:7070", name, *addr)
	}
	var services []string
	for x := range strings.SplitSeq(*only, ",") {
		services = append(services, strings.TrimSpace(x))
	}
	o := stack.Options{Addr: *addr, Only: services, DataDir: *data, DatabaseURL: env(s, "DATABASE_URL"), Upstreams: *upstreams,
		Kafka: kafkalog.Config{Brokers: strings.Split(*brokers, ",")}}
	if err := o.Validate(); err != nil {
		t.Errorf("service %s: serve %v would refuse to start: %v", name, args[1:], err)
	}
	checkLedgerTokens(t, p, name, s, args, services)
	if slices.Contains(services, stack.ServiceProjector) {
		mounted := slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Type == types.VolumeTypeVolume && v.Target == *data
		})
		if !mounted {
			t.Errorf("service %s: the projector's state (--data %s) is not on a named volume: a new container would refold every run", name, *data)
		}
	}
}

// checkLedgerTokens checks that a serve with an HTTP front (ingest or api)
// is given a token file that the ledger accepts: serve refuses to start
// without tokens unless told --insecure, which the stack must not be.
func checkLedgerTokens(t *testing.T, p *types.Project, name string, s types.ServiceConfig, args, services []string) {
	t.Helper()
	if slices.Contains(args, "--insecure") {
		t.Errorf("service %s: serve --insecure accepts requests from anyone; give it a token file", name)
	}
	if !slices.Contains(services, stack.ServiceIngest) && !slices.Contains(services, stack.ServiceAPI) {
		return
	}
	target := env(s, "ROLLOUTLEDGER_TOKENS_FILE")
	if target == "" {
		t.Errorf("service %s: serve %v has no ROLLOUTLEDGER_TOKENS_FILE and would refuse to start", name, args[1:])
		return
	}
	var source string
	for _, ref := range s.Secrets {
		secretTarget := ref.Target
		if secretTarget == "" {
			secretTarget = ref.Source
		}
		if !strings.HasPrefix(secretTarget, "/") {
			secretTarget = "/run/secrets/" + secretTarget
		}
		if secretTarget == target {
			source = p.Secrets[ref.Source].File
		}
	}
	if source == "" {
		t.Errorf("service %s: ROLLOUTLEDGER_TOKENS_FILE=%s is not one of its secrets", name, target)
		return
	}
	tokens, err := auth.LoadFile(source)
	if err != nil {
		t.Errorf("service %s: its token file: %v", name, err)
		return
	}
	if _, err := auth.New(tokens); err != nil {
		t.Errorf("service %s: its token file: %v", name, err)
	}
}

var voter = regexp.MustCompile(`^(\d+)@([a-z0-9-]+):(\d+)$`)

// checkKafka checks that the brokers form one cluster, that the ledger
// reaches all of them and starts only once all are there, and that the
// three-broker mode gives the durability it promises.
func checkKafka(t *testing.T, p *types.Project, m stackMode) {
	t.Helper()
	first := p.Services[m.brokers[0]]
	cluster := env(first, "CLUSTER_ID")
	voters := strings.Split(env(first, "KAFKA_CONTROLLER_QUORUM_VOTERS"), ",")
	if len(voters) != len(m.brokers) {
		t.Errorf("controller quorum %v has %d voters, want %d", voters, len(voters), len(m.brokers))
	}
	for _, name := range m.brokers {
		s := p.Services[name]
		if got := env(s, "CLUSTER_ID"); got != cluster || got == "" {
			t.Errorf("%s: CLUSTER_ID %q, want one id for every broker (%q)", name, got, cluster)
		}
		if got := env(s, "KAFKA_CONTROLLER_QUORUM_VOTERS"); got != strings.Join(voters, ",") {
			t.Errorf("%s: quorum voters %q, want %q", name, got, strings.Join(voters, ","))
		}
		id := env(s, "KAFKA_NODE_ID")
		if !slices.ContainsFunc(voters, func(v string) bool {
			g := voter.FindStringSubmatch(v)
			return g != nil && g[1] == id && g[2] == name
		}) {
			t.Errorf("%s: node %s is not among the voters %v under its own host name", name, id, voters)
		}
		if !strings.Contains(env(s, "KAFKA_ADVERTISED_LISTENERS"), "PLAINTEXT://"+name+":9092") {
			t.Errorf("%s: advertises %q, want PLAINTEXT://%s:9092 for the other containers", name, env(s, "KAFKA_ADVERTISED_LISTENERS"), name)
		}
		if hc := strings.Join(s.HealthCheck.Test, " "); !strings.Contains(hc, "-ge "+strconv.Itoa(len(m.brokers))) {
			t.Errorf("%s: health check %q does not wait for all %d brokers", name, hc, len(m.brokers))
		}
	}
	rf, isr := len(m.brokers), 1
	if rf >= 3 {
		isr = 2
	}
	if got := env(first, "KAFKA_DEFAULT_REPLICATION_FACTOR"); got != strconv.Itoa(rf) {
		t.Errorf("default replication factor %s, want %d", got, rf)
	}
	if got := env(first, "KAFKA_MIN_INSYNC_REPLICAS"); got != strconv.Itoa(isr) {
		t.Errorf("min.insync.replicas %s, want %d", got, isr)
	}
	for name, s := range p.Services {
		if s.Build == nil || len(s.Command) == 0 || s.Command[0] != "serve" {
			continue
		}
		var got []string
		for b := range strings.SplitSeq(env(s, "KAFKA_BROKERS"), ",") {
			host, _, _ := strings.Cut(b, ":")
			got = append(got, host)
		}
		if !slices.Equal(got, m.brokers) {
			t.Errorf("service %s: KAFKA_BROKERS names %v, want %v", name, got, m.brokers)
		}
		if d, ok := s.DependsOn["kafka"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("service %s does not wait for Kafka to be healthy", name)
		}
	}
}

// The gateway routes to services that exist, on the port they listen on:
// to ingest, and to two or more projector replicas, each with its own state
// volume, so that the trainer's api survives losing one.
func TestGatewayRoutesToServices(t *testing.T) {
	p := loadCompose(t, stackModes[0])
	gw, ok := p.Services["gateway"]
	if !ok {
		t.Fatal("no gateway service")
	}
	fs := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	only := fs.String("only", "", "")
	upstreams := fs.StringSlice("upstream", nil, "")
	if len(gw.Command) == 0 || gw.Command[0] != "serve" {
		t.Fatalf("gateway runs %v, want serve --only gateway", gw.Command)
	}
	if err := fs.Parse(gw.Command[1:]); err != nil {
		t.Fatal(err)
	}
	if *only != stack.ServiceGateway {
		t.Errorf("gateway: --only %q, want gateway", *only)
	}
	runs := map[string]int{}
	volumes := map[string]string{}
	for _, u := range *upstreams {
		m := regexp.MustCompile(`^http://([a-z0-9-]+):(\d+)$`).FindStringSubmatch(u)
		if m == nil {
			t.Errorf("gateway upstream %q is not http://<service>:<port>", u)
			continue
		}
		s, ok := p.Services[m[1]]
		if !ok {
			t.Errorf("gateway routes to %s, which is no service of the stack", m[1])
			continue
		}
		if m[2] != "7070" {
			t.Errorf("gateway routes to %s:%s; the ledger's services listen on 7070", m[1], m[2])
		}
		args := []string(s.Command)
		for i, a := range args {
			if a == "--only" && i+1 < len(args) {
				for x := range strings.SplitSeq(args[i+1], ",") {
					runs[x]++
				}
			}
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume {
				if other, taken := volumes[v.Source]; taken {
					t.Errorf("%s and %s share the volume %s: each replica needs its own state", other, m[1], v.Source)
				}
				volumes[v.Source] = m[1]
			}
		}
	}
	if runs[stack.ServiceIngest] == 0 {
		t.Error("no gateway upstream runs ingest")
	}
	if runs[stack.ServiceAPI] < 2 {
		t.Errorf("%d gateway upstreams run the api, want at least 2 replicas", runs[stack.ServiceAPI])
	}
}
