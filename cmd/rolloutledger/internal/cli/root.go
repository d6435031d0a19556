// Package cli holds the rolloutledger subcommands. Each command parses its
// flags, builds the services' option structs, and hands over to the
// services, replay and projections packages; no ledger logic lives here.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "rolloutledger:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

type globals struct {
	stdout, stderr io.Writer
	logLevel       string
	logFormat      string
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "rolloutledger",
		Short: "The event-sourced ledger and replay system for asynchronous agentic RL",
		Long: `rolloutledger records every turn, tool call, weight version, reward and gradient
step of an asynchronous RL run as an immutable Kafka event, and folds them
deterministically into training batches, task admission, Postgres tables and
audits that replay a run bit for bit.

Start with: rolloutledger demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "", "log format: text or json (default: text for dev and demo, json for serve)")
	root.AddCommand(
		newDevCmd(g), newServeCmd(g), newSimulateCmd(g), newDemoCmd(g),
		newReplayCmd(g),
		newExportCmd(g),
		newAuditCmd(g),
		newExploreCmd(g),
		newProveCmd(g),
		newMigrateCmd(g), newProjectionsCmd(g),
		newHealthcheckCmd(g),
		newBenchCmd(g),
		newProxyCmd(g),
	)
	return root
}

func (g *globals) logger(defaultFormat string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	format := g.logFormat
	if format == "" {
		format = defaultFormat
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(g.stderr, opts))), nil
	case "json":
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(g.stderr, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// kafkaFlags are the flags of every command that talks to Kafka.
type kafkaFlags struct {
	brokers      string
	topicPrefix  string
	partitions   int
	sec          kafkalog.Security
	passwordFile string
}

func addKafkaFlags(cmd *cobra.Command) *kafkaFlags {
	k := &kafkaFlags{}
	def := os.Getenv("KAFKA_BROKERS")
	if def == "" {
		def = "127.0.0.1:9092"
	}
	cmd.Flags().StringVar(&k.brokers, "brokers", def, "Kafka bootstrap brokers, comma-separated (default $KAFKA_BROKERS)")
	cmd.Flags().StringVar(&k.topicPrefix, "topic-prefix", kafkalog.DefaultTopicPrefix, "prefix of the <prefix>.facts and <prefix>.decisions topics")
	cmd.Flags().IntVar(&k.partitions, "partitions", 12, "partitions of each topic when it is created")
	f := cmd.Flags()
	f.BoolVar(&k.sec.TLS, "kafka-tls", os.Getenv("KAFKA_TLS") == "true", "connect to the brokers over TLS (default $KAFKA_TLS=true; implied by the other --kafka-tls-* flags)")
	f.StringVar(&k.sec.CAFile, "kafka-tls-ca", os.Getenv("KAFKA_TLS_CA"), "PEM file of the CAs that sign the brokers' certificates (default $KAFKA_TLS_CA, else the system's)")
	f.StringVar(&k.sec.CertFile, "kafka-tls-cert", os.Getenv("KAFKA_TLS_CERT"), "PEM client certificate, for brokers that require one (default $KAFKA_TLS_CERT)")
	f.StringVar(&k.sec.KeyFile, "kafka-tls-key", os.Getenv("KAFKA_TLS_KEY"), "PEM key of --kafka-tls-cert (default $KAFKA_TLS_KEY)")
	f.StringVar(&k.sec.ServerName, "kafka-tls-server-name", os.Getenv("KAFKA_TLS_SERVER_NAME"), "name the brokers' certificates are checked against (default: the broker's host)")
	f.StringVar(&k.sec.SASLMechanism, "kafka-sasl-mechanism", os.Getenv("KAFKA_SASL_MECHANISM"), "SASL mechanism: SCRAM-SHA-256 or SCRAM-SHA-512 (default $KAFKA_SASL_MECHANISM; empty: no SASL)")
	f.StringVar(&k.sec.Username, "kafka-sasl-username", os.Getenv("KAFKA_SASL_USERNAME"), "SASL username (default $KAFKA_SASL_USERNAME)")
	f.StringVar(&k.passwordFile, "kafka-sasl-password-file", os.Getenv("KAFKA_SASL_PASSWORD_FILE"), "file holding the SASL password (default $KAFKA_SASL_PASSWORD_FILE; or set $KAFKA_SASL_PASSWORD)")
	return k
}

func (k *kafkaFlags) config() (kafkalog.Config, error) {
	var brokers []string
	for b := range strings.SplitSeq(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	c := kafkalog.Config{Brokers: brokers, TopicPrefix: k.topicPrefix, Partitions: k.partitions}
	sec := k.sec
	// The password never comes from a flag: command lines are visible to
	// every user of the machine.
	sec.Password = os.Getenv("KAFKA_SASL_PASSWORD")
	if k.passwordFile != "" {
		b, err := os.ReadFile(k.passwordFile)
		if err != nil {
			return c, fmt.Errorf("--kafka-sasl-password-file: %w", err)
		}
		sec.Password = strings.TrimRight(string(b), "\r\n")
	}
	if err := sec.Apply(&c); err != nil {
		return c, err
	}
	return c, nil
}

// newTelemetry sets up tracing and metrics as the OTEL_* environment
// variables say (tracing off unless asked for), with service.name
// defaulting to service; the OpenTelemetry SDK's own errors (an
// unreachable collector) go to log.
func newTelemetry(ctx context.Context, service string, log *slog.Logger) (*telemetry.Telemetry, error) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry", "err", err)
	}))
	return telemetry.New(ctx, telemetry.Config{ServiceName: service})
}
