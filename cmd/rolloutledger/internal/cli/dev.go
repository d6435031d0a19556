package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/internal/embedded"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

func newDevCmd(g *globals) *cobra.Command {
	var addr, kafkaAddr, data, prefix string
	var partitions int
	var fsync bool
	var dbURL func() string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process on embedded defaults (in-process Kafka broker, HTTP on loopback)",
		Long: `dev runs an in-process Kafka-protocol broker, reachable by any Kafka client at
--kafka-addr, with its data under --data, and the ledger's services on --addr.
Stopping it (even with kill -9) and starting it again keeps every acknowledged
event. dev has no authentication, so both addresses must be on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("text")
			if err != nil {
				return err
			}
			d, err := startDev(cmd.Context(), devOptions{
				Addr: addr, KafkaAddr: kafkaAddr, Data: data, TopicPrefix: prefix,
				Partitions: partitions, SyncWrites: fsync, Logger: log, DatabaseURL: dbURL(),
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "rolloutledger dev: HTTP at %s, Kafka at %s, data in %s\n", d.stack.URL(), d.broker.Addr(), data)
			select {
			case <-cmd.Context().Done():
				log.Info("shutting down")
			case err := <-d.stack.Done():
				log.Error("HTTP server stopped", "err", err)
			}
			return d.close(30 * time.Second)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "HTTP listen address")
	cmd.Flags().StringVar(&kafkaAddr, "kafka-addr", "127.0.0.1:9092", "listen address of the embedded Kafka broker")
	cmd.Flags().StringVar(&data, "data", "./.rolloutledger", "directory for the broker's data and the projections' state")
	cmd.Flags().StringVar(&prefix, "topic-prefix", kafkalog.DefaultTopicPrefix, "prefix of the topics")
	cmd.Flags().IntVar(&partitions, "partitions", 12, "partitions of each topic")
	dbURL = addDatabaseFlag(cmd)
	cmd.Flags().BoolVar(&fsync, "fsync", false, "fsync every produced batch (survives machine crashes, not only process crashes)")
	return cmd
}

type devOptions struct {
	Addr, KafkaAddr, Data, TopicPrefix string
	Partitions                         int
	SyncWrites                         bool
	Logger                             *slog.Logger

	// DatabaseURL, when set, runs the Postgres projection too.
	DatabaseURL string
}

// devStack is the embedded broker plus the services over it.
type devStack struct {
	broker *embedded.Broker
	stack  *stack.Stack
	kafka  kafkalog.Config
	tel    *telemetry.Telemetry
}

// requireLoopback refuses a listen address other hosts could reach: dev and
// demo run without tokens, and the embedded broker without any
// authentication.
func requireLoopback(flag, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s %q: dev runs without authentication and listens on loopback only (127.0.0.1, ::1 or localhost); to serve other hosts, run `rolloutledger serve` with API tokens (docs/security.md)", flag, addr)
}

func startDev(ctx context.Context, o devOptions) (*devStack, error) {
	if err := errors.Join(requireLoopback("--addr", o.Addr), requireLoopback("--kafka-addr", o.KafkaAddr)); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tel, err := newTelemetry(ctx, telemetry.DefaultServiceName, log)
	if err != nil {
		return nil, err
	}
	b, err := embedded.Start(embedded.Options{
		Addr: o.KafkaAddr, DataDir: filepath.Join(o.Data, "kafka"), Partitions: o.Partitions,
		SyncWrites: o.SyncWrites, Logger: o.Logger,
	})
	if err != nil {
		tel.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	kc := kafkalog.Config{Brokers: []string{b.Addr()}, TopicPrefix: o.TopicPrefix, Partitions: o.Partitions}
	s, err := stack.Start(ctx, stack.Options{Addr: o.Addr, Kafka: kc, DataDir: o.Data, Logger: o.Logger, DatabaseURL: o.DatabaseURL, Telemetry: tel})
	if err != nil {
		b.Close()
		tel.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	return &devStack{broker: b, stack: s, kafka: kc, tel: tel}, nil
}

func (d *devStack) close(grace time.Duration) error {
	ctx, cancel := contextWithTimeout(grace)
	defer cancel()
	err := d.stack.Shutdown(ctx)
	d.broker.Close()
	return errors.Join(err, d.tel.Shutdown(ctx))
}
