package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the proxy's Prometheus instruments, with labels kept to
// small fixed sets (never a run or attempt id).
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec   // {route, outcome}
	turns      *prometheus.CounterVec   // {outcome}: recorded, tagged, refused
	added      *prometheus.HistogramVec // {route}: seconds the proxy added
	sent       prometheus.Counter
	refused    prometheus.Counter
	sendErrors prometheus.Counter
	vocabulary *prometheus.CounterVec   // {outcome}: registered, known, failed
	phase      *prometheus.HistogramVec // {phase}: where a recorded request's time goes
	// attemptChecks counts --strict's questions to the ledger by answer:
	// started, not_started, unknown, refused, unavailable.
	attemptChecks *prometheus.CounterVec
}

// The phases of a recorded request that [metrics.phase] times.
const (
	// phaseForward: from the request's arrival until the engine's answer
	// headers (reading and editing the request, the hop to the engine,
	// and the engine's own work).
	phaseForward = "forward"
	// phasePromptIDs: the engine's /apply-template and /tokenize, asked
	// while it generates, or after the answer for a held turn.
	phasePromptIDs = "prompt_ids"
	// phaseHold: a held turn's synced write, before its answer goes out
	// (held.go); its build and spool_commit come after the answer.
	phaseHold = "hold"
	// phasePromptWait: the part of phasePromptIDs still running when the
	// answer was read, which the harness waits for.
	phasePromptWait = "prompt_ids_wait"
	// phaseBuild: the turn's facts, built, encoded and checked.
	phaseBuild = "build"
	// phaseSpool: the synced spool commit.
	phaseSpool = "spool_commit"
)

func newMetrics(sp *spool) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rolloutledger_proxy_requests_total", Help: "Requests by route and outcome.",
	}, []string{"route", "outcome"})
	m.turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rolloutledger_proxy_turns_total", Help: "Turns spooled, by whether they passed every check (ok), were tagged, or refused in --strict.",
	}, []string{"outcome"})
	m.added = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rolloutledger_proxy_added_seconds",
		Help:    "Time the proxy spent on a recorded request outside the engine's answer: parsing, prompt ids, the spool commit.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
	}, []string{"route"})
	m.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "rolloutledger_proxy_facts_sent_total", Help: "Facts the ledger acknowledged."})
	m.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "rolloutledger_proxy_facts_refused_total", Help: "Facts the ledger refused, kept in the spool as dead letters."})
	m.sendErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "rolloutledger_proxy_send_errors_total", Help: "Sends to the ledger that failed and will be retried."})
	m.vocabulary = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rolloutledger_proxy_vocabulary_total", Help: "Runs whose vocabulary the proxy spooled (registered), found spooled before (known), or could not fetch (failed; a later turn tries again).",
	}, []string{"outcome"})
	m.phase = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rolloutledger_proxy_phase_seconds",
		Help:    "Time of a recorded request's phases: forward (until the engine's answer headers), prompt_ids (the engine's template and tokenizer, asked while it generates), prompt_ids_wait (the part of it the answer waited for), build (facts encoded and checked), spool_commit (the synced commit).",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
	}, []string{"phase"})
	m.attemptChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rolloutledger_proxy_attempt_checks_total", Help: "--strict's questions to the ledger before an attempt's first turn, by answer: started, not_started, unknown, refused, unavailable.",
	}, []string{"outcome"})
	m.reg.MustRegister(m.requests, m.turns, m.added, m.sent, m.refused, m.sendErrors, m.vocabulary, m.phase, m.attemptChecks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rolloutledger_proxy_spool_facts", Help: "Facts in the spool waiting for the ledger."},
			func() float64 { return float64(sp.count.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rolloutledger_proxy_spool_bytes", Help: "Bytes of facts in the spool waiting for the ledger."},
			func() float64 { return float64(sp.queued.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rolloutledger_proxy_held_turns", Help: "Turns answered whose facts wait for their prompt's ids (llama.cpp chat)."},
			func() float64 { return float64(sp.held.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rolloutledger_proxy_dead_letters", Help: "Facts the ledger refused, kept in the spool."},
			func() float64 { return float64(sp.dead.Load()) }),
	)
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }
