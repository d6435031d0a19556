package cli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func newServeCmd(g *globals) *cobra.Command {
	var addr, only, data string
	var own []int
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the services against real Kafka (and Postgres)",
		Long: `serve runs the ledger's services against the Kafka cluster at --brokers.
--only picks a subset: ingest, projector, pgsink, api (default: every service
this build provides; the pgsink when --database-url or $DATABASE_URL is set,
after applying the Postgres migrations).

Every process serves GET /healthz and GET /metrics (Prometheus) on --addr.
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
	cmd.Flags().IntSliceVar(&own, "own-partitions", nil, "facts partitions this instance's projector owns, e.g. 0,1,2 (default: all)")
	dbURL := addDatabaseFlag(cmd)
	cmd.Flags().StringVar(&only, "only", "", "comma-separated services to run (ingest, projector, pgsink, api)")
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
		s, err := stack.Start(cmd.Context(), stack.Options{Addr: addr, Kafka: kf.config(), Only: services, DataDir: data, ProjectorPartitions: own, Logger: log, DatabaseURL: dbURL(), Telemetry: tel})
		if err != nil {
			return err
		}
		select {
		case <-cmd.Context().Done():
			log.Info("shutting down")
		case err := <-s.Done():
			log.Error("HTTP server stopped", "err", err)
		}
		ctx, cancel := contextWithTimeout(30 * time.Second)
		defer cancel()
		return s.Shutdown(ctx)
	}
	return cmd
}
