package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Options configure a [Server]. The zero value of each field means the
// documented default; Engine, Upstreams, Ledger and SpoolDir are required.
type Options struct {
	// Upstreams are the engines' base URLs (http://host:port). An
	// attempt's requests all go to one of them (its prefix cache), chosen
	// by rendezvous hashing, so adding or removing one moves only its
	// attempts.
	Upstreams []string
	// Engine is vllm, sglang or llamacpp: what to ask for and where the
	// answers put ids.
	Engine string
	// Ledger is the ledger's HTTP base URL (its ingest); Token the bearer
	// token sent to it, never to an engine.
	Ledger string
	Token  string
	// SpoolDir holds the spool; SpoolMaxBytes caps the facts waiting for
	// the ledger (default 1 GiB): past it recorded requests get 503.
	SpoolDir      string
	SpoolMaxBytes int64
	// Strict refuses requests without an attempt, requests of an attempt
	// the ledger has no attempt.started for (strict.go), and turns whose ids
	// cannot be verified.
	Strict bool
	// NoVocabulary turns off registering the engine's vocabulary
	// (vocabulary.registered, once per run, in the background; llama.cpp
	// only: the other engines' routes give no token's bytes).
	NoVocabulary bool
	// MaxBodyBytes bounds a request body (default 32 MiB).
	MaxBodyBytes int64
	// AdminToken, when set, is required to announce weight versions;
	// unset, only loopback clients may.
	AdminToken string
	// Source is the producer identity of the facts (default
	// "rolloutledger-proxy").
	Source string
	// PolicyVersion is the version the engine serves at start, until the
	// trainer announces another.
	PolicyVersion int64
	// IdleAttempt is how long an attempt unseen stays in memory (default
	// 10 min; its state stays in the spool).
	IdleAttempt time.Duration
	// AttemptRetention is how long after its last answer an attempt's
	// prefix marks and last sequence stay in the spool (default 24 h;
	// negative: for ever). Past it an attempt that comes back is numbered
	// on, and its next prompt is recorded whole, with no parent.
	AttemptRetention time.Duration
	// Client talks to the engines and the ledger (default: a transport
	// with keep-alive pools sized for thousands of attempts, whose
	// requests are sent again on a new connection when a reused one
	// closed before the answer began: see [replayable]).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// Defaults of [Options].
const (
	DefaultSpoolMaxBytes    = 1 << 30
	DefaultMaxBodyBytes     = 32 << 20
	DefaultSource           = "rolloutledger-proxy"
	DefaultIdleAttempt      = 10 * time.Minute
	DefaultAttemptRetention = 24 * time.Hour
)

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	switch o.Engine {
	case EngineVLLM, EngineSGLang, EngineLlamaCPP:
	case "":
		errs = append(errs, errors.New("proxy: --engine is required: vllm, sglang or llamacpp"))
	default:
		errs = append(errs, fmt.Errorf("proxy: --engine %q: want vllm, sglang or llamacpp", o.Engine))
	}
	if len(o.Upstreams) == 0 {
		errs = append(errs, errors.New("proxy: --upstream is required: the engine's base URL"))
	}
	for _, u := range o.Upstreams {
		if err := checkBase(u); err != nil {
			errs = append(errs, fmt.Errorf("proxy: --upstream %q: %w", u, err))
		}
	}
	if o.Ledger == "" {
		errs = append(errs, errors.New("proxy: --ledger is required: the ledger's HTTP base URL"))
	} else if err := checkBase(o.Ledger); err != nil {
		errs = append(errs, fmt.Errorf("proxy: --ledger %q: %w", o.Ledger, err))
	}
	if o.SpoolDir == "" {
		errs = append(errs, errors.New("proxy: --spool is required: a directory for turns not yet in the ledger"))
	}
	if o.SpoolMaxBytes < 0 || o.MaxBodyBytes < 0 || o.PolicyVersion < 0 || o.IdleAttempt < 0 {
		errs = append(errs, errors.New("proxy: sizes, durations and the policy version must not be negative"))
	}
	return errors.Join(errs...)
}

func checkBase(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return errors.New("want http(s)://host:port")
	}
	if u.User != nil {
		return errors.New("credentials in the URL would be logged; pass a token instead")
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.SpoolMaxBytes == 0 {
		o.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	if o.IdleAttempt == 0 {
		o.IdleAttempt = DefaultIdleAttempt
	}
	if o.AttemptRetention == 0 {
		o.AttemptRetention = DefaultAttemptRetention
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 4096
		tr.MaxIdleConnsPerHost = 4096
		tr.DisableCompression = true
		o.Client = &http.Client{Transport: replayable{tr}}
	}
	return o
}

// replayable marks each request it sends as one Go's transport may send
// again. An engine closes a keep-alive connection it has left idle for a
// few seconds (llama.cpp's server after 5, uvicorn's too), and a request
// sent on a pooled connection as the engine closes it fails before any
// answer: unmarked, a POST is not retried and the client gets a 502. The
// transport retries a marked request, on a new connection, only when the
// failure came on a reused connection before the answer's first byte, so
// an engine repeats at most a generation whose answer never reached the
// proxy: the turn recorded stays the one answer the client gets. The mark
// (an Idempotency-Key header without a value, net/http's convention) is
// not sent; a request that carries its own key keeps it.
type replayable struct{ http.RoundTripper }

func (t replayable) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, ok := r.Header["Idempotency-Key"]; ok {
		return t.RoundTripper.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header["Idempotency-Key"] = nil
	return t.RoundTripper.RoundTrip(r)
}
