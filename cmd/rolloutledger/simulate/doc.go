// Package simulate drives a ledger with a synthetic, FireFlash-shaped
// training run: the workload of the integration tests, the benchmarks and
// `rolloutledger simulate`.
//
// [Generate] builds a whole run as a [Plan] without I/O; [NewSource] yields
// the same events in the same order a piece at a time, holding the
// attempts in flight and a short summary of each group (its schedule
// unfolds as the events are read), so a run of any length fits in flat
// memory; [Run] generates one that way and pushes it over HTTP
// (`POST /v1/events`) as it goes.
//
// # Determinism
//
// Event content, `at` included, is a pure function of [Options.Seed] and the
// scale options. Only the event ids (UUIDv7, from [events.New]) and a
// defaulted run id are random, so two runs of one seed differ in nothing
// else and do not collide in one ledger. Each attempt draws from its own PCG
// stream, so the inline token arrays ([Options.Tokens]) are drawn apart from
// everything else: a run with tokens is the same run as one without, plus
// the arrays.
//
// # Content
//
// The scheduler opens the run (run.started with the full configuration) and
// registers the tasks, each with a hidden pass probability: about 15% are
// always solved, 15% never, the rest in between. Every task gets a probe
// group of four attempts; the tasks whose probe pass rate lies in the pass
// band get train groups, round-robin, until Steps*BatchGroups train groups
// are usable (neither zero-signal nor lost), plus a 5% margin; two eval
// groups run on the side. The policy learns: train attempts close up to 30%
// of the gap between their task's pass probability and 1 by the last step.
//
// An attempt's turns are long-tailed in count (solves shorter than
// failures), its context grows with completions and tool output and is
// compacted past the context budget; tool calls redirect long output to
// files, run some jobs in the background, time out now and then. An
// infrastructure failure cuts an attempt short after a few turns
// (attempt.failed); a retry with retry_of takes its slot, and after two
// failed retries the scheduler closes the group.
//
// # Timeline
//
// Attempts are dispatched over a pool of virtual engines (1.25 per attempt
// of a batch, up to 2,000) in virtual milliseconds from [Epoch]: probe
// groups first, a task's train groups once its probes completed, retries
// ahead of fresh attempts. The trainer stand-in then publishes version k a
// training step after batch k is complete (the batches the projector will
// seal, predicted in virtual-time order), and every turn carries the
// version current when it started. So no turn is newer than the batch that
// trains it, typical staleness is 0–4, and long attempts leave a tail past
// the default max_staleness of 6 once a run has enough steps for it
// (staleness in batch k is at most k-1).
//
// # Pushing
//
// The ledger keeps only each producer's own order, so a [Plan] is a set of
// producer [Stream]s: the scheduler, each engine, the verifier and the
// trainer. [Run] sends run.started first, then cuts the merged virtual-time
// order ([Plan.All]) into windows and releases them one after another;
// within a window, Workers goroutines send the streams' pieces, each piece
// request after request, waiting for every 200. A 503 or a lost connection
// is retried with the same body (same ids) with exponential backoff; a 4xx
// stops the run with the ledger's message.
package simulate
