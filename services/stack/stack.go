// Package stack assembles the ledger's services into one running process:
// the HTTP server, the Kafka writer, and (as they are built) the projector,
// the Postgres sink and the query API. `rolloutledger dev`, `serve` and
// `demo` all run a Stack; tests run it too.
package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/services/api"
	"github.com/rolloutledger/rolloutledger/services/explore"
	"github.com/rolloutledger/rolloutledger/services/gateway"
	"github.com/rolloutledger/rolloutledger/services/ingest"
	"github.com/rolloutledger/rolloutledger/services/pgsink"
	"github.com/rolloutledger/rolloutledger/services/projector"
)

// Service names accepted by Options.Only.
const (
	ServiceIngest    = "ingest"
	ServiceProjector = "projector"
	ServicePgsink    = "pgsink"
	ServiceAPI       = "api"
	// ServiceGateway is the front door of a deployment of several
	// processes (services/gateway); it runs alone.
	ServiceGateway = "gateway"
)

// Available lists the services this build can run. The pgsink runs only
// with a database URL; the gateway only when named.
var Available = []string{ServiceIngest, ServiceProjector, ServicePgsink, ServiceAPI, ServiceGateway}

// Options configure a Stack.
type Options struct {
	// Addr is the HTTP listen address, e.g. 127.0.0.1:7070; port 0 picks one.
	Addr string
	// Kafka locates the brokers and names the topics.
	Kafka kafkalog.Config
	// Only restricts the services run; empty means every available one.
	Only []string
	// DataDir holds the projector's state (DataDir/projector).
	DataDir string
	// DatabaseURL is the Postgres of the analysts' read model; the pgsink
	// runs when it is set (and, with Only, when named). Its migrations are
	// applied on start.
	DatabaseURL string
	// PostgresSchema is the read model's schema [pgsink.DefaultSchema].
	PostgresSchema string
	// ProjectorPartitions are the facts partitions this instance's
	// projector owns; nil means all. Instances that split a topic's
	// partitions between them must each have their own DataDir.
	ProjectorPartitions []int
	// ArrowBodyBytes bounds the Arrow bodies the projector keeps on disk
	// ([projector.Options.ArrowBodyBytes]).
	ArrowBodyBytes int64
	// Upstreams are the base URLs of the processes the gateway routes to
	// (with Only = [gateway]).
	Upstreams []string
	// Auth checks every request's bearer token; nil serves without
	// authentication (dev, demo, serve --insecure).
	Auth *auth.Authenticator
	// TLSCertFile and TLSKeyFile, both set, serve HTTPS (TLS 1.2 or newer)
	// with this PEM certificate chain and key.
	TLSCertFile, TLSKeyFile string
	// HTTP bounds what clients may hold of the HTTP server: timeouts and
	// the connection cap (zero: the httpx defaults).
	HTTP httpx.ServerOptions
	// Bodies bound ingest's request bodies: one, all at once, one
	// client's, and the floor rate they must arrive at (zero: the
	// httpx.BodyLimits defaults).
	Bodies httpx.BodyLimits
	// Logger is the stack's logger; nil discards.
	Logger *slog.Logger
	// Telemetry receives every service's spans and metrics, served at
	// GET /metrics; nil means metrics only (no tracing), owned and shut
	// down by the stack.
	Telemetry *telemetry.Telemetry
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.Addr == "" {
		errs = append(errs, errors.New("stack: no HTTP address"))
	}
	gw := slices.Contains(o.Only, ServiceGateway)
	switch {
	case gw && len(o.Only) > 1:
		errs = append(errs, errors.New("stack: the gateway runs alone (--only gateway): it routes to the processes that run the other services"))
	case gw:
		if err := (gateway.Options{Upstreams: o.Upstreams}).Validate(); err != nil {
			errs = append(errs, err)
		}
	case len(o.Upstreams) > 0:
		errs = append(errs, errors.New("stack: upstreams are for the gateway: add --only gateway or drop --upstream"))
	}
	if err := o.Kafka.Validate(); err != nil && !gw {
		errs = append(errs, err)
	}
	if err := o.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Bodies.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range o.Only {
		if !slices.Contains(Available, s) {
			errs = append(errs, fmt.Errorf("stack: unknown service %q (want one of %s)", s, strings.Join(Available, ", ")))
		}
	}
	only := o.services()
	if slices.Contains(only, ServiceAPI) && !slices.Contains(only, ServiceProjector) {
		errs = append(errs, errors.New("stack: the api serves the projector's state and runs in the projector's process: add projector to --only"))
	}
	if slices.Contains(only, ServicePgsink) && o.DatabaseURL == "" {
		errs = append(errs, errors.New("stack: the pgsink needs a database URL (--database-url or $DATABASE_URL)"))
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, errors.New("stack: TLS needs both a certificate (--tls-cert) and a key (--tls-key)"))
	}
	if slices.Contains(only, ServiceProjector) && o.DataDir == "" {
		errs = append(errs, errors.New("stack: the projector needs a data directory for its state"))
	}
	return errors.Join(errs...)
}

func (o Options) services() []string {
	if len(o.Only) > 0 {
		return o.Only
	}
	return slices.DeleteFunc(slices.Clone(Available), func(s string) bool {
		return s == ServiceGateway || (s == ServicePgsink && o.DatabaseURL == "")
	})
}

// Stack is a running set of services.
type Stack struct {
	opts   Options
	log    *slog.Logger
	writer *kafkalog.Writer
	srv    *http.Server
	ln     net.Listener
	served chan error
	parts  map[string]int
	routes []auth.Route

	proj     *projector.Projector
	stopProj context.CancelFunc
	projDone chan struct{}

	sink     *pgsink.Sink
	stopSink context.CancelFunc
	sinkDone chan struct{}

	gw *gateway.Gateway

	tel    *telemetry.Telemetry
	ownTel bool // created by Start, shut down by Shutdown

	// checks are the last outcome of each health check, so that the log
	// tells when one starts and stops failing.
	checks struct {
		sync.Mutex
		failing map[string]string
	}
}

// Start bootstraps the topics, starts the services and begins serving HTTP.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.Only = o.services()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gw := slices.Contains(o.Only, ServiceGateway)
	var parts map[string]int
	if !gw {
		var err error
		if parts, err = kafkalog.EnsureTopics(ctx, o.Kafka); err != nil {
			return nil, err
		}
	}
	var tlsConfig *tls.Config
	if o.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("stack: TLS certificate %s and key %s: %w", o.TLSCertFile, o.TLSKeyFile, err)
		}
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	s := &Stack{opts: o, log: log, served: make(chan error, 1), parts: parts, tel: o.Telemetry}
	if s.tel == nil {
		// Metrics only: tracing is for the process to configure.
		tel, err := telemetry.New(ctx, telemetry.Config{Getenv: func(string) string { return "" }})
		if err != nil {
			return nil, err
		}
		s.tel, s.ownTel = tel, true
	}
	// abort releases whatever was opened before a later step failed.
	abort := func(err error) (*Stack, error) {
		s.closeWriter()
		if s.proj != nil {
			s.proj.Close()
		}
		if s.gw != nil {
			s.gw.Close()
		}
		if s.ownTel {
			s.tel.Shutdown(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	if gw {
		// The gateway authenticates nothing itself: it passes every request,
		// its bearer token included, to a process that checks it.
		g, err := gateway.New(gateway.Options{Upstreams: o.Upstreams, Logger: log, Telemetry: s.tel})
		if err != nil {
			return abort(err)
		}
		s.gw = g
		g.Start(ctx)
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", g.ServeHealth)
		mux.Handle("GET /metrics", s.tel.MetricsHandler())
		mux.Handle("/", g)
		return s.serve(ctx, mux, tlsConfig, abort)
	}
	// Every route is registered on the router, which checks each request's
	// token, role and run scope on what it routed.
	mux := auth.NewRouter(o.Auth, log)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /metrics", s.tel.MetricsHandler())
	if slices.Contains(o.Only, ServiceIngest) {
		s.writer = kafkalog.NewWriter(o.Kafka, o.Kafka.FactsTopic(), kafkalog.WriterOptions{Logger: log, Telemetry: s.tel})
		(&ingest.Service{Appender: s.writer, Logger: log, Telemetry: s.tel, Bodies: o.Bodies}).Register(mux)
	}
	if slices.Contains(o.Only, ServiceProjector) {
		p, err := projector.Open(projector.Options{Kafka: o.Kafka, Dir: filepath.Join(o.DataDir, "projector"), Partitions: o.ProjectorPartitions, ArrowBodyBytes: o.ArrowBodyBytes, Logger: log, Telemetry: s.tel})
		if err != nil {
			return abort(err)
		}
		s.proj = p
		if slices.Contains(o.Only, ServiceAPI) {
			(&api.Service{Projector: p, Logger: log, Streams: o.HTTP.Streams}).Register(mux)
			(&explore.Service{Kafka: o.Kafka, Runs: p, Records: p.ExplorerRecords, Logger: log}).Register(mux)
		}
	}
	if slices.Contains(o.Only, ServicePgsink) {
		if _, err := pgsink.Migrate(ctx, o.DatabaseURL, o.PostgresSchema, log); err != nil {
			return abort(err)
		}
		sink, err := pgsink.New(pgsink.Options{Kafka: o.Kafka, DatabaseURL: o.DatabaseURL, Schema: o.PostgresSchema, Logger: log, Telemetry: s.tel})
		if err != nil {
			return abort(err)
		}
		s.sink = sink
	}
	s.routes = mux.Routes()
	return s.serve(ctx, mux, tlsConfig, abort)
}

// serve starts the services' loops and the HTTP server.
func (s *Stack) serve(ctx context.Context, mux http.Handler, tlsConfig *tls.Config, abort func(error) (*Stack, error)) (*Stack, error) {
	o, log := s.opts, s.log
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return abort(fmt.Errorf("stack: listen on %s: %w", o.Addr, err))
	}
	s.srv, s.ln = httpx.NewServer(ln, s.tel.HTTPHandler(mux), o.HTTP, log)
	s.srv.TLSConfig = tlsConfig
	if s.proj != nil {
		pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		s.stopProj, s.projDone = stop, make(chan struct{})
		go func() {
			defer close(s.projDone)
			if err := s.proj.Run(pctx); err != nil {
				log.Error("projector stopped", "err", err)
				select {
				case s.served <- err:
				default:
				}
			}
		}()
	}
	if s.sink != nil {
		// The sink retries every failure itself; it returns only when
		// stopped.
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		s.stopSink, s.sinkDone = stop, make(chan struct{})
		go func() {
			defer close(s.sinkDone)
			_ = s.sink.Run(sctx)
		}()
	}
	if tlsConfig != nil {
		go func() { s.served <- s.srv.ServeTLS(s.ln, "", "") }()
	} else {
		go func() { s.served <- s.srv.Serve(s.ln) }()
	}
	authn := "off"
	if o.Auth != nil {
		authn = strings.Join(o.Auth.Names(), ",")
	}
	if s.gw != nil {
		log.Info("serving", "url", s.URL(), "services", ServiceGateway, "upstreams", strings.Join(o.Upstreams, ","))
		return s, nil
	}
	log.Info("serving", "url", s.URL(), "tokens", authn, "services", strings.Join(o.Only, ","), "brokers", strings.Join(o.Kafka.Brokers, ","), "facts_topic", o.Kafka.FactsTopic())
	return s, nil
}

// Addr is the HTTP address the stack listens on.
func (s *Stack) Addr() string { return s.ln.Addr().String() }

// URL is the base URL of the stack's HTTP interface.
func (s *Stack) URL() string {
	if s.opts.TLSCertFile != "" {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Routes lists the HTTP routes the stack serves, each with the access it
// needs and whether it is held to a token's run scope.
func (s *Stack) Routes() []auth.Route { return s.routes }

// Partitions reports the partition count of each of the ledger's topics.
func (s *Stack) Partitions() map[string]int { return s.parts }

// Done receives the error of a service that stopped on its own.
func (s *Stack) Done() <-chan error { return s.served }

// Shutdown stops accepting requests, lets in-flight ones finish (each waits
// for its Kafka acknowledgment), then closes the Kafka writer.
func (s *Stack) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if s.proj != nil {
		s.stopProj()
		<-s.projDone
		err = errors.Join(err, s.proj.Close())
	}
	if s.sink != nil {
		s.stopSink()
		<-s.sinkDone
	}
	if s.gw != nil {
		s.gw.Close()
	}
	err = errors.Join(err, s.closeWriter())
	if s.ownTel {
		err = errors.Join(err, s.tel.Shutdown(ctx))
	}
	return err
}

// Telemetry is the stack's telemetry: its spans and metrics.
func (s *Stack) Telemetry() *telemetry.Telemetry { return s.tel }

// Sink is the stack's Postgres sink, nil when it does not run one.
func (s *Stack) Sink() *pgsink.Sink { return s.sink }

// Gateway is the stack's gateway, nil when it does not run one.
func (s *Stack) Gateway() *gateway.Gateway { return s.gw }

// Projector is the stack's projector, nil when it does not run one.
func (s *Stack) Projector() *projector.Projector { return s.proj }

func (s *Stack) closeWriter() error {
	if s.writer == nil {
		return nil
	}
	return s.writer.Close()
}

// Codes of GET /healthz's 503.
const (
	CodeKafkaUnreachable = "kafka_unreachable"
	CodeNotFolding       = "projector_not_folding"
)

// healthz answers GET /healthz, which needs no token: 200 with the
// services run while they reach Kafka and the projector folds, else 503
// with a stable code. The answer names no broker and no error: anyone who
// reaches the port reads it. Why a check fails goes to the log and
// /metrics (rolloutledger_healthy).
func (s *Stack) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	_, err := kafkalog.EndOffsets(ctx, s.opts.Kafka, s.opts.Kafka.FactsTopic())
	if r.Context().Err() != nil {
		return // the prober left: nothing learned
	}
	s.noteCheck(ctx, telemetry.CheckKafka, err)
	if err != nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, CodeKafkaUnreachable,
			"the service cannot reach Kafka; its log and /metrics say more")
		return
	}
	if s.proj != nil {
		err := s.proj.Health()
		s.noteCheck(ctx, telemetry.CheckProjector, err)
		if err != nil {
			httpx.WriteError(w, http.StatusServiceUnavailable, CodeNotFolding,
				"the projector is not folding, and retries; its log and /metrics say more")
			return
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "services": s.opts.Only})
}

// noteCheck records a health check's outcome in /metrics, and in the log
// when it starts failing, fails otherwise, or passes again.
func (s *Stack) noteCheck(ctx context.Context, check string, err error) {
	s.tel.Metrics.Healthy(ctx, check, err == nil)
	s.checks.Lock()
	if s.checks.failing == nil {
		s.checks.failing = map[string]string{}
	}
	was, failed := s.checks.failing[check]
	if err == nil {
		delete(s.checks.failing, check)
	} else {
		s.checks.failing[check] = err.Error()
	}
	s.checks.Unlock()
	switch {
	case err != nil && (!failed || was != err.Error()):
		s.log.Warn("health check failing", "check", check, "brokers", strings.Join(s.opts.Kafka.Brokers, ","), "err", err)
	case err == nil && failed:
		s.log.Info("health check passing again", "check", check)
	}
}
