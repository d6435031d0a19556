package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/projections"
)

// TrainerOptions configure [Train].
type TrainerOptions struct {
	// URL is the ledger's base URL; Run the run to train on.
	URL, Run string
	// Steps is how many batches to consume before stopping.
	Steps int
	// Idle bounds the wait for one batch once Pushed is closed and the
	// projector has folded every acknowledged fact of the run (see
	// Acknowledged); default 10 s. Until then the trainer waits as long as
	// rollouts go on or the projector catches up.
	Idle time.Duration
	// Stalled bounds the wait for a projector that has not folded every
	// acknowledged fact and folds none for that long; default 5 min. Train
	// then fails, naming how far the projector got: the ledger, not the
	// trainer, is stuck.
	Stalled time.Duration
	// Pushed is closed when the rollouts are all acknowledged; nil means
	// they already are.
	Pushed <-chan struct{}
	// Acknowledged, when set, holds how many of the run's events the
	// ledger acknowledged to the rollouts; it is read once Pushed is
	// closed. The projector has caught up when its status's facts_folded
	// reaches them and the trainer's own. Without it the projector counts
	// as caught up once facts_folded stops growing.
	Acknowledged *atomic.Int64
	// Published, when set, is raised to each version the trainer publishes.
	Published *atomic.Int64
	// Arrow fetches each batch's samples as a trainer does, as Arrow IPC
	// (the NDJSON lines are then not counted: SampleLines is 0).
	Arrow bool
	// OnFetch, when set, is called after each batch's samples are read,
	// with their size and how long the fetch took.
	OnFetch func(Fetch)
	// Seed makes the reported losses and gaps deterministic per batch.
	Seed   uint64
	Token  string
	Client *http.Client
	Logger *slog.Logger
}

// Fetch is one batch's samples read by the trainer stand-in.
type Fetch struct {
	Run   string
	Batch int
	Bytes int64
	Took  time.Duration
}

// TrainerStep is what the trainer stand-in saw in one batch and reported.
type TrainerStep struct {
	Step         int            `json:"step"`
	Digest       string         `json:"digest"`
	Groups       int            `json:"groups"`
	Dropped      map[string]int `json:"dropped"`
	Turns        int            `json:"turns"`
	TrainedTurns int            `json:"trained_turns"`
	Staleness    map[string]int `json:"staleness_histogram"`
	InFlight     map[string]int `json:"in_flight"`
	InQueue      map[string]int `json:"in_queue"`
	// PassRate is the share of the batch's attempts whose score is 1;
	// TokensPerSolve the completion tokens of those solves, averaged.
	PassRate       float64 `json:"pass_rate"`
	TokensPerSolve float64 `json:"tokens_per_solve"`
	SampleLines    int     `json:"sample_lines"`
	// PartlyTrainedTurns counts turns that span a weight update and of
	// which some version segments train and others are masked as stale;
	// TrainedTokens and MaskedTokens split the batch's completion tokens
	// by segment (docs/design.md §18.3).
	PartlyTrainedTurns int   `json:"partly_trained_turns"`
	TrainedTokens      int64 `json:"trained_tokens"`
	MaskedTokens       int64 `json:"masked_tokens"`
	// Watermark is the position of the fact that sealed the batch, and
	// Received when the trainer had its manifest.
	Watermark projections.LogPosition `json:"watermark"`
	Received  time.Time               `json:"-"`
}

// MaskedFraction is the share of the batch's turns that do not train.
func (s TrainerStep) MaskedFraction() float64 {
	if s.Turns == 0 {
		return 0
	}
	return float64(s.Turns-s.TrainedTurns) / float64(s.Turns)
}

// Train stands in for a fully asynchronous trainer: it long-polls the
// ledger for batch k, reads its samples, and answers with gradient.applied
// (carrying the batch's digest) and policy.published version k. Rollouts
// never wait for it; it only ever waits for the ledger. It returns the steps
// it took, stopping after Steps batches, or when Pushed is closed and no
// batch came within Idle.
func Train(ctx context.Context, o TrainerOptions) ([]TrainerStep, error) {
	if o.Idle == 0 {
		o.Idle = 10 * time.Second
	}
	if o.Stalled == 0 {
		o.Stalled = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 2 * time.Minute}
	}
	base := strings.TrimRight(o.URL, "/") + "/v1/runs/" + o.Run
	p := newPusher(Options{URL: o.URL, Token: o.Token, Client: o.Client, Logger: o.Logger, Workers: 1}.withDefaults())
	var steps []TrainerStep
	var idleSince time.Time
	folded := uint64(0)
	for k := 1; k <= o.Steps; k++ {
		m, ok, err := nextBatch(ctx, o, base, k)
		received := time.Now()
		if err != nil {
			return steps, err
		}
		if !ok {
			select {
			case <-o.Pushed:
				// A projector still catching up on the run (a slow or
				// loaded machine) may seal the batch yet: the trainer
				// gives up only once it has folded every fact, Idle after
				// it last folded one, or when it folds nothing for Stalled.
				if n, err := factsFolded(ctx, o, base); err == nil && n > folded {
					folded, idleSince = n, time.Time{}
				}
				if idleSince.IsZero() {
					idleSince = time.Now()
				}
				want := uint64(0)
				if o.Acknowledged != nil {
					want = uint64(o.Acknowledged.Load() + p.events.Load())
				}
				switch idle := time.Since(idleSince); {
				case folded >= want && idle > o.Idle:
					o.Logger.Info("trainer: no further batch sealed; stopping", "run", o.Run, "steps", len(steps))
					return steps, nil
				case idle > o.Stalled:
					return steps, fmt.Errorf("trainer: waiting for batch %d, the projector folded %d of the run's %d acknowledged facts and none for %v",
						k, folded, want, idle.Round(time.Second))
				}
			default:
			}
			k--
			continue
		}
		idleSince = time.Time{}
		lines, err := sampleLines(ctx, o, base, k)
		if err != nil {
			return steps, err
		}
		st := observe(m, lines)
		st.Watermark, st.Received = m.Watermark, received
		if err := report(ctx, p, o, m, st); err != nil {
			return steps, err
		}
		if o.Published != nil {
			o.Published.Store(int64(k))
		}
		o.Logger.Info("trainer: step applied", "run", o.Run, "step", k, "groups", st.Groups, "masked", st.MaskedFraction())
		steps = append(steps, st)
	}
	return steps, nil
}

// FactsFolded is run's facts_folded in the status of the ledger at url:
// how many of its facts the projector has folded, duplicates included.
func FactsFolded(ctx context.Context, url, run, token string) (uint64, error) {
	o := TrainerOptions{Token: token, Client: http.DefaultClient}
	return factsFolded(ctx, o, strings.TrimRight(url, "/")+"/v1/runs/"+run)
}

// factsFolded is the facts_folded of the run whose API base is base.
func factsFolded(ctx context.Context, o TrainerOptions, base string) (uint64, error) {
	resp, err := get(ctx, o, base+"/status", "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("trainer: status: %s", resp.Status)
	}
	var st struct {
		FactsFolded uint64 `json:"facts_folded"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st.FactsFolded, err
}

// get sends a GET with the trainer's token, and accept as Accept when set.
func get(ctx context.Context, o TrainerOptions, url, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return o.Client.Do(req)
}

// nextBatch long-polls for batch k for up to a second, so the caller can
// notice the end of the rollouts.
func nextBatch(ctx context.Context, o TrainerOptions, base string, k int) (projections.Manifest, bool, error) {
	var m projections.Manifest
	resp, err := get(ctx, o, fmt.Sprintf("%s/batches/next?after=%d&wait=1s", base, k-1), "")
	if err != nil {
		return m, false, fmt.Errorf("trainer: poll batch %d: %w", k, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return m, false, nil
	case http.StatusOK:
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return m, false, fmt.Errorf("trainer: batch %d manifest: %w", k, err)
		}
		if m.Seq != uint64(k) {
			return m, false, fmt.Errorf("trainer: asked for batch %d, got %d", k, m.Seq)
		}
		return m, true, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return m, false, fmt.Errorf("trainer: poll batch %d: %s: %s", k, resp.Status, b)
}

func sampleLines(ctx context.Context, o TrainerOptions, base string, k int) (int, error) {
	start := time.Now()
	accept := ""
	if o.Arrow {
		accept = "application/vnd.apache.arrow.stream"
	}
	resp, err := get(ctx, o, fmt.Sprintf("%s/batches/%d/samples", base, k), accept)
	if err != nil {
		return 0, fmt.Errorf("trainer: samples of batch %d: %w", k, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("trainer: samples of batch %d: %s: %s", k, resp.Status, b)
	}
	lines, n := 0, int64(0)
	buf := make([]byte, 256<<10)
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if !o.Arrow {
			lines += bytes.Count(buf[:m], []byte("\n"))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("trainer: samples of batch %d: %w", k, err)
		}
	}
	if o.OnFetch != nil {
		o.OnFetch(Fetch{Run: o.Run, Batch: k, Bytes: n, Took: time.Since(start)})
	}
	return lines, nil
}

func observe(m projections.Manifest, lines int) TrainerStep {
	st := TrainerStep{
		Step: int(m.Seq), Digest: m.Digest, Groups: m.Stats.Groups, Dropped: map[string]int{},
		Turns: m.Stats.Turns, TrainedTurns: m.Stats.TrainedTurns, Staleness: m.Stats.StalenessHistogram,
		InFlight: m.Stats.InFlight, InQueue: m.Stats.InQueue, SampleLines: lines,
		TrainedTokens: m.Stats.TrainedTokens, MaskedTokens: m.Stats.MaskedTokens,
	}
	for _, d := range m.Dropped {
		st.Dropped[d.Reason]++
	}
	attempts, solves, solveTokens := 0, 0, int64(0)
	for _, g := range m.Groups {
		for _, a := range g.Attempts {
			for _, t := range a.Turns {
				trained := 0
				for _, seg := range t.Segments {
					if seg.Trained {
						trained++
					}
				}
				if trained > 0 && trained < len(t.Segments) {
					st.PartlyTrainedTurns++
				}
			}
			attempts++
			if a.Score == 1 {
				solves++
				solveTokens += a.CompletionTokens
			}
		}
	}
	if attempts > 0 {
		st.PassRate = float64(solves) / float64(attempts)
	}
	if solves > 0 {
		st.TokensPerSolve = float64(solveTokens) / float64(solves)
	}
	return st
}

// report posts the step's gradient.applied and the new policy version, the
// numbers shaped like the recipe's (log-prob gap 0.065 at staleness 1
// rising to about 0.08 at 4–6; 1–3% of tokens truncated).
func report(ctx context.Context, p *pusher, o TrainerOptions, m projections.Manifest, st TrainerStep) error {
	r := rand.New(rand.NewPCG(o.Seed, m.Seq))
	gap := map[string]float64{}
	for key := range st.Staleness {
		s, err := strconv.Atoi(key)
		if err != nil || s < 0 {
			continue
		}
		base := 0.05 + 0.015*math.Min(float64(s), 1) + 0.005*math.Min(math.Max(float64(s)-1, 0), 3)
		gap[key] = math.Round((base+r.Float64()*0.004)*1e5) / 1e5
	}
	k := int64(m.Seq)
	at := Epoch.Add(time.Duration(k) * time.Hour)
	evs := []events.Event{
		events.New(o.Run, "trainer", at, &events.GradientApplied{
			Step: k, Batch: k, BatchDigest: m.Digest, FromVersion: k - 1, ToVersion: k,
			Loss:              math.Round((0.9/math.Sqrt(float64(k))+r.Float64()*0.05)*1e5) / 1e5,
			TrainedTokens:     int64(st.TrainedTurns) * 600,
			TruncatedFraction: math.Round((0.01+r.Float64()*0.02)*1e5) / 1e5,
			LogprobGap:        gap,
			GradNorm:          math.Round((0.5+r.Float64())*1e4) / 1e4,
		}),
		events.New(o.Run, "trainer", at, &events.PolicyPublished{
			Version: k, Checkpoint: fmt.Sprintf("ckpt/step-%d", k),
			Digest: fmt.Sprintf("sha256:%064x", r.Uint64()), Precision: "fp8",
		}),
	}
	return p.sendUnit(ctx, unit{stream: "trainer", events: evs})
}
