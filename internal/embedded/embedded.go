// Package embedded runs an in-process Kafka-protocol broker (kfake) for the
// dev stack, so the ledger's real Kafka client code runs with nothing
// installed. Its data persists under a directory and survives restarts,
// including kill -9: writes reach the operating system before a produce is
// acknowledged.
package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configure the embedded broker.
type Options struct {
	// Addr is the host:port the broker listens on; port 0 picks a free one.
	Addr string
	// DataDir holds the broker's data; empty keeps everything in memory.
	DataDir string
	// Partitions is the default partition count of new topics; default 12.
	Partitions int
	// SyncWrites fsyncs every produced batch before acknowledging it, so
	// data survives a machine crash, not just a process crash.
	SyncWrites bool
	// Logger receives the broker's warnings; nil discards them.
	Logger *slog.Logger
}

// Broker is a running embedded broker.
type Broker struct {
	c    *kfake.Cluster
	addr string
}

// Start starts the broker and waits until it accepts connections.
func Start(o Options) (*Broker, error) {
	host, portStr, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("embedded: --kafka-addr %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded: --kafka-addr %q: bad port", o.Addr)
	}
	if o.Partitions == 0 {
		o.Partitions = 12
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DefaultNumPartitions(o.Partitions),
		// Listen exactly where asked (kfake defaults to 127.0.0.1).
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, portStr))
		}),
		kfake.WithLogger(logger{o.Logger}),
	}
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded: data dir: %w", err)
		}
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	if o.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: start broker on %s: %w", o.Addr, err)
	}
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		return nil, fmt.Errorf("embedded: broker reports no listen address")
	}
	b := &Broker{c: c, addr: addrs[0]}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", b.addr)
		if err == nil {
			conn.Close()
			return b, nil
		}
		if ctx.Err() != nil {
			c.Close()
			return nil, fmt.Errorf("embedded: broker on %s not answering: %w", b.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr is the address Kafka clients connect to.
func (b *Broker) Addr() string { return b.addr }

// Close stops the broker, flushing its data to disk.
func (b *Broker) Close() { b.c.Close() }

type logger struct{ l *slog.Logger }

func (l logger) Logf(level kfake.LogLevel, msg string, args ...any) {
	if l.l == nil || level > kfake.LogLevelWarn {
		return
	}
	lvl := slog.LevelWarn
	if level == kfake.LogLevelError {
		lvl = slog.LevelError
	}
	l.l.Log(context.Background(), lvl, fmt.Sprintf(msg, args...), "component", "embedded-kafka")
}
