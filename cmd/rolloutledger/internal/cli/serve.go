package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/services/projector"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// errNoTokens is serve's answer when it would expose the ledger to anyone.
var errNoTokens = errors.New(`serve: no API tokens are configured, and without them anyone who reaches --addr could write facts.
Configure tokens in one of these ways (format and roles: docs/security.md):
  --tokens-file FILE                 a YAML or JSON list of {name, token or sha256, role, runs}
  ROLLOUTLEDGER_TOKENS_FILE=FILE     the same, from the environment
  ROLLOUTLEDGER_TOKENS='[...]'       the list itself, inline
or pass --insecure to serve without authentication (trusted networks only)`)

func newServeCmd(g *globals) *cobra.Command {
	var addr, only, data, tokensFile, tlsCert, tlsKey string
	var insecure bool
	var own []int
	var streams httpx.StreamLimits
	var streamBudgetMiB, arrowMiB int64
	var upstreams []string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the services against real Kafka (and Postgres)",
		Long: `serve runs the ledger's services against the Kafka cluster at --brokers.
--only picks a subset: ingest, projector, pgsink, api (default: every service
this build provides; the pgsink when --database-url or $DATABASE_URL is set,
after applying the Postgres migrations).

--only gateway --upstream URL,URL,... runs the front door of a deployment of
several processes instead: POST /v1/events to the upstreams that run ingest,
the rest of /v1 to one of those that run the api, failing over to the next
when it goes down (docs/operations.md, "Staying available"). The gateway
checks no tokens itself; the upstreams do.

Every HTTP route but /healthz and /metrics needs a bearer token of a role
that allows it (producer, trainer, reader, admin; see docs/security.md).
serve refuses to start without tokens unless --insecure is given.

Every process serves GET /healthz and GET /metrics (Prometheus) on --addr.
/healthz needs no token and answers 200, or 503 with a stable code
(kafka_unreachable, projector_not_folding, upstreams_unavailable); which
broker or upstream failed, and why, is in the log and in /metrics. A serve
running the projector stays up while Kafka is gone, answering 503, and
folds again once the brokers are back.
Tracing is off unless the standard OpenTelemetry variables ask for it:
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) sends spans over
OTLP (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc); OTEL_SERVICE_NAME
defaults to rolloutledger, or rolloutledger-<service> with one --only
service; OTEL_SDK_DISABLED=true turns tracing and the ledger's metrics off.`,
		Args: cobra.NoArgs,
	}
	kf := addKafkaFlags(cmd)
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "HTTP listen address")
	cmd.Flags().StringVar(&data, "data", "./.rolloutledger", "directory for the projector's state")
	cmd.Flags().Int64Var(&arrowMiB, "arrow-cache-mib", projector.DefaultArrowBodyBytes>>20, "MiB of sealed batches' Arrow bodies kept beside the projector's state for trainers' fetches; the oldest past it are rendered from the samples when fetched (0: none kept)")
	cmd.Flags().IntSliceVar(&own, "own-partitions", nil, "facts partitions this instance's projector owns, e.g. 0,1,2 (default: all)")
	dbURL := addDatabaseFlag(cmd)
	cmd.Flags().StringVar(&only, "only", "", "comma-separated services to run (ingest, projector, pgsink, api), or gateway alone")
	cmd.Flags().StringSliceVar(&upstreams, "upstream", nil, "with --only gateway: base URLs of the ledger processes to route to, the api's in order of preference")
	cmd.Flags().StringVar(&tokensFile, "tokens-file", os.Getenv(auth.EnvTokensFile), "YAML or JSON file of API tokens (default $"+auth.EnvTokensFile+"; $"+auth.EnvTokens+" adds tokens inline)")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "serve without authentication: anyone who reaches --addr may read and write")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "PEM certificate chain: serve HTTPS (TLS 1.2 or newer) with --tls-key")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().Int64Var(&streamBudgetMiB, "stream-budget-mib", httpx.DefaultStreamBudget>>20, "MiB all samples responses may hold at once; past it a request waits --stream-wait, then gets 503")
	cmd.Flags().IntVar(&streams.StreamsPerClient, "streams-per-client", httpx.DefaultStreamsPerClient, "samples responses one token (one address with --insecure) may have open at once; more get 429 (negative: no bound)")
	cmd.Flags().DurationVar(&streams.Wait, "stream-wait", httpx.DefaultStreamWait, "how long a samples response waits for room in --stream-budget-mib before 503")
	cmd.Flags().DurationVar(&streams.WriteTimeout, "stream-write-timeout", httpx.DefaultStreamWriteTimeout, "a samples client that takes nothing of a 256 KiB write for this long is cut off")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := g.logger("json")
		if err != nil {
			return err
		}
		var services []string
		for s := range strings.SplitSeq(only, ",") {
			if s = strings.TrimSpace(s); s != "" {
				services = append(services, s)
			}
		}
		authn, err := serveAuth(services, tokensFile, insecure)
		if err != nil {
			return err
		}
		name := telemetry.DefaultServiceName
		if len(services) == 1 {
			name += "-" + services[0]
		}
		tel, err := newTelemetry(cmd.Context(), name, log)
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := contextWithTimeout(10 * time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				log.Warn("flushing telemetry", "err", err)
			}
		}()
		kc, err := kf.config()
		if err != nil {
			return err
		}
		if streamBudgetMiB < 0 {
			return fmt.Errorf("serve: --stream-budget-mib %d is negative", streamBudgetMiB)
		}
		streams.Budget = streamBudgetMiB << 20
		if arrowMiB < 0 {
			return fmt.Errorf("serve: --arrow-cache-mib %d is negative", arrowMiB)
		}
		s, err := stack.Start(cmd.Context(), stack.Options{
			Addr: addr, Kafka: kc, Only: services, DataDir: data, ProjectorPartitions: own, ArrowBodyBytes: arrowBytes(arrowMiB), Upstreams: upstreams, Logger: log, DatabaseURL: dbURL(),
			Auth: authn, TLSCertFile: tlsCert, TLSKeyFile: tlsKey, Telemetry: tel, HTTP: httpx.ServerOptions{Streams: streams},
		})
		if err != nil {
			return err
		}
		if authn == nil {
			log.Warn("serving without authentication (--insecure): anyone who reaches the address may read and write")
		}
		select {
		case <-cmd.Context().Done():
			log.Info("shutting down")
		case err := <-s.Done():
			log.Error("a service stopped", "err", err)
		}
		ctx, cancel := contextWithTimeout(30 * time.Second)
		defer cancel()
		return s.Shutdown(ctx)
	}
	return cmd
}

// serveAuth loads the tokens serve checks requests against. It refuses to
// go on without tokens unless insecure, or when the services run serve no
// route but health (a projector or sink alone).
func serveAuth(services []string, tokensFile string, insecure bool) (*auth.Authenticator, error) {
	tokens, err := auth.Load(tokensFile, os.Getenv)
	if err != nil {
		return nil, err
	}
	if insecure {
		if len(tokens) > 0 {
			return nil, errors.New("serve: --insecure and API tokens both given: drop one")
		}
		return nil, nil
	}
	if len(tokens) == 0 {
		routes := len(services) == 0 || slices.Contains(services, stack.ServiceIngest) || slices.Contains(services, stack.ServiceAPI)
		if !routes {
			return nil, nil
		}
		return nil, errNoTokens
	}
	return auth.New(tokens)
}

// arrowBytes is the projector's Arrow body budget for --arrow-cache-mib:
// 0 keeps none.
func arrowBytes(mib int64) int64 {
	if mib == 0 {
		return -1
	}
	return mib << 20
}
