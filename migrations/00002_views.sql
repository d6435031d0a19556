-- The analysts' views (docs/analysts.md has an example query for each).
--
-- Views over decisions (step_metrics, staleness_histogram, task_metrics,
-- task_solve_rate_by_step, logprob_gap_by_staleness) give exactly what the
-- projections concluded. Views over facts (tool_usage, compaction_savings,
-- infra_health, infra_failure_reasons, attempt_costs, run_costs) count every
-- stored fact; where a fact type can be declared twice for one entity, the
-- first in log order is taken, as the projections do. Ratios are double
-- precision and NULL where their denominator is 0.

-- +goose Up

-- One row per run and trainer step (= batch seq).
CREATE VIEW step_metrics AS
WITH att AS (
    SELECT run, batch,
           count(*)                                              AS attempts,
           count(*) FILTER (WHERE score = 1)                     AS solves,
           sum(completion_tokens) FILTER (WHERE score = 1)       AS solve_tokens,
           avg(in_flight)::double precision                      AS mean_in_flight,
           max(in_flight)                                        AS max_in_flight,
           avg(in_queue)::double precision                       AS mean_in_queue,
           max(in_queue)                                         AS max_in_queue
      FROM batch_attempts
     GROUP BY run, batch
), trn AS (
    SELECT run, batch,
           count(*)                                              AS turns,
           count(*) FILTER (WHERE trained)                       AS trained_turns,
           avg(staleness)::double precision                      AS mean_staleness,
           max(staleness)                                        AS max_staleness
      FROM batch_turns
     GROUP BY run, batch
), drp AS (
    SELECT run, batch,
           count(*)                                              AS dropped,
           count(*) FILTER (WHERE reason = 'zero_signal')        AS zero_signal,
           count(*) FILTER (WHERE reason = 'infra_lost')         AS infra_lost,
           count(*) FILTER (WHERE reason = 'unadmitted')         AS unadmitted,
           count(*) FILTER (WHERE reason = 'fully_stale')        AS fully_stale
      FROM batch_drops
     GROUP BY run, batch
), grad AS (
    SELECT DISTINCT ON (run, batch) run, batch, loss, trained_tokens, truncated_fraction, grad_norm, batch_digest
      FROM gradient_steps
     ORDER BY run, batch, log_offset
)
SELECT b.run,
       b.seq                                                          AS step,
       b.trainer_version,
       b.groups,
       coalesce(d.dropped, 0)                                         AS dropped_groups,
       b.groups + coalesce(d.dropped, 0)                              AS completed_groups,
       coalesce(d.zero_signal, 0)::double precision / (b.groups + coalesce(d.dropped, 0)) AS zero_signal_rate,
       coalesce(d.infra_lost, 0)::double precision  / (b.groups + coalesce(d.dropped, 0)) AS infra_lost_rate,
       coalesce(d.unadmitted, 0)::double precision  / (b.groups + coalesce(d.dropped, 0)) AS unadmitted_rate,
       coalesce(d.fully_stale, 0)::double precision / (b.groups + coalesce(d.dropped, 0)) AS fully_stale_rate,
       coalesce(a.attempts, 0)                                        AS attempts,
       coalesce(a.solves, 0)                                          AS solves,
       a.solves::double precision / nullif(a.attempts, 0)             AS pass_rate,
       a.solve_tokens::double precision / nullif(a.solves, 0)         AS tokens_per_solve,
       coalesce(t.turns, 0)                                           AS turns,
       coalesce(t.trained_turns, 0)                                   AS trained_turns,
       (t.turns - t.trained_turns)::double precision / nullif(t.turns, 0) AS masked_turn_fraction,
       t.mean_staleness,
       t.max_staleness,
       a.mean_in_flight,
       a.max_in_flight,
       a.mean_in_queue,
       a.max_in_queue,
       g.loss,
       g.trained_tokens,
       g.truncated_fraction,
       g.grad_norm,
       g.batch_digest = b.digest                                      AS digest_matches
  FROM batches b
  LEFT JOIN att a  ON a.run = b.run AND a.batch = b.seq
  LEFT JOIN trn t  ON t.run = b.run AND t.batch = b.seq
  LEFT JOIN drp d  ON d.run = b.run AND d.batch = b.seq
  LEFT JOIN grad g ON g.run = b.run AND g.batch = b.seq;

-- Turns per run, step and staleness; share is of the step's turns.
CREATE VIEW staleness_histogram AS
SELECT run,
       batch                                                          AS step,
       staleness,
       count(*)                                                       AS turns,
       count(*) FILTER (WHERE trained)                                AS trained_turns,
       count(*)::double precision / sum(count(*)) OVER (PARTITION BY run, batch) AS share
  FROM batch_turns
 GROUP BY run, batch, staleness;

-- The trainer's reported log-prob gap per step and staleness, beside the
-- number of the step's turns at that staleness.
CREATE VIEW logprob_gap_by_staleness AS
WITH grad AS (
    SELECT DISTINCT ON (run, batch) run, batch, event_id
      FROM gradient_steps
     ORDER BY run, batch, log_offset
), hist AS (
    SELECT run, batch, staleness, count(*) AS turns
      FROM batch_turns
     GROUP BY run, batch, staleness
)
SELECT g.run,
       g.batch                                                        AS step,
       l.staleness,
       l.gap,
       coalesce(h.turns, 0)                                           AS turns
  FROM grad g
  JOIN gradient_logprob_gaps l ON l.event_id = g.event_id
  LEFT JOIN hist h ON h.run = g.run AND h.batch = g.batch AND h.staleness = l.staleness;

-- One row per run and task: registration, admission, how often trained.
CREATE VIEW task_metrics AS
WITH keys AS (
    SELECT run, task FROM tasks
    UNION SELECT run, task FROM admissions
    UNION SELECT run, task FROM batch_groups
), reg AS (
    SELECT DISTINCT ON (run, task) run, task, source, kind, tier, event_id
      FROM tasks
     ORDER BY run, task, log_offset
), gates AS (
    SELECT event_id, count(*) AS gates, count(*) FILTER (WHERE passed) AS gates_passed
      FROM task_gates
     GROUP BY event_id
), adm AS (
    SELECT DISTINCT ON (run, task) run, task, decision, probes, passes, pass_rate
      FROM admissions
     ORDER BY run, task, fact_seq
), trained AS (
    SELECT g.run, g.task,
           count(DISTINCT (g.batch, g.group_id))                      AS times_trained,
           min(g.batch)                                               AS first_step,
           max(g.batch)                                               AS last_step,
           count(a.attempt)                                           AS trained_attempts,
           count(a.attempt) FILTER (WHERE a.score = 1)                AS trained_solves
      FROM batch_groups g
      LEFT JOIN batch_attempts a ON a.run = g.run AND a.batch = g.batch AND a.group_id = g.group_id
     GROUP BY g.run, g.task
)
SELECT k.run,
       k.task,
       r.source,
       r.kind,
       r.tier,
       gt.gates,
       gt.gates_passed,
       coalesce(ad.decision, 'pending')                               AS admission,
       ad.probes,
       ad.passes,
       ad.pass_rate                                                   AS probe_pass_rate,
       coalesce(tr.times_trained, 0)                                  AS times_trained,
       coalesce(tr.trained_attempts, 0)                               AS trained_attempts,
       coalesce(tr.trained_solves, 0)                                 AS trained_solves,
       tr.trained_solves::double precision / nullif(tr.trained_attempts, 0) AS solve_rate,
       tr.first_step,
       tr.last_step
  FROM keys k
  LEFT JOIN reg r      ON r.run = k.run AND r.task = k.task
  LEFT JOIN gates gt   ON gt.event_id = r.event_id
  LEFT JOIN adm ad     ON ad.run = k.run AND ad.task = k.task
  LEFT JOIN trained tr ON tr.run = k.run AND tr.task = k.task;

-- A task's solve rate in each step that trained it: how it moves over time.
CREATE VIEW task_solve_rate_by_step AS
SELECT g.run,
       g.task,
       g.batch                                                        AS step,
       count(*)                                                       AS attempts,
       count(*) FILTER (WHERE a.score = 1)                            AS solves,
       (count(*) FILTER (WHERE a.score = 1))::double precision / count(*) AS solve_rate
  FROM batch_groups g
  JOIN batch_attempts a ON a.run = g.run AND a.batch = g.batch AND a.group_id = g.group_id
 GROUP BY g.run, g.task, g.batch;

-- Tool calls per run and tool; tool '*' is the run's total. A failure is a
-- non-zero exit code (timeouts included).
CREATE VIEW tool_usage AS
SELECT run,
       coalesce(tool, '*')                                            AS tool,
       count(*)                                                       AS calls,
       count(*) FILTER (WHERE exit_code <> 0)                         AS failures,
       (count(*) FILTER (WHERE exit_code <> 0))::double precision / count(*) AS failure_rate,
       count(*) FILTER (WHERE timed_out)                              AS timeouts,
       (count(*) FILTER (WHERE timed_out))::double precision / count(*) AS timeout_rate,
       count(*) FILTER (WHERE to_file)                                AS to_file,
       (count(*) FILTER (WHERE to_file))::double precision / count(*) AS to_file_rate,
       count(*) FILTER (WHERE background)                             AS background,
       (count(*) FILTER (WHERE background))::double precision / count(*) AS background_rate,
       avg(duration_ms)::double precision                             AS mean_duration_ms,
       sum(output_bytes)                                              AS output_bytes,
       coalesce(sum(output_bytes) FILTER (WHERE to_file), 0)          AS output_bytes_to_file
  FROM tool_calls
 GROUP BY GROUPING SETS ((run, tool), (run));

-- Context compaction per run: how many tokens it took out of the context.
CREATE VIEW compaction_savings AS
WITH c AS (
    SELECT run,
           count(*)                                                   AS compactions,
           count(DISTINCT attempt)                                    AS attempts_compacted,
           sum(tokens_before)                                         AS tokens_before,
           sum(tokens_after)                                          AS tokens_after
      FROM compactions
     GROUP BY run
), a AS (
    SELECT run, count(DISTINCT attempt) AS attempts
      FROM attempts
     GROUP BY run
)
SELECT c.run,
       c.compactions,
       c.attempts_compacted,
       a.attempts,
       c.attempts_compacted::double precision / nullif(a.attempts, 0) AS compacted_attempt_fraction,
       c.tokens_before,
       c.tokens_after,
       c.tokens_before - c.tokens_after                               AS tokens_saved,
       1 - c.tokens_after::double precision / nullif(c.tokens_before, 0) AS saved_fraction,
       (c.tokens_before - c.tokens_after)::double precision / c.compactions AS mean_saved_per_compaction
  FROM c
  LEFT JOIN a ON a.run = c.run;

-- Infrastructure per run: microVM fork times, infra failures, retries,
-- closed groups, and train groups lost to infrastructure (infra_lost drops
-- over completed train groups, up to the last sealed batch).
CREATE VIEW infra_health AS
WITH a AS (
    SELECT run,
           count(*)                                                   AS attempts,
           count(*) FILTER (WHERE retry_of IS NOT NULL)               AS retries,
           avg(fork_ms)::double precision                             AS mean_fork_ms,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY fork_ms)       AS p50_fork_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY fork_ms)      AS p95_fork_ms,
           max(fork_ms)                                               AS max_fork_ms
      FROM attempts
     GROUP BY run
), f AS (
    SELECT run, count(*) AS infra_failures FROM attempt_failures GROUP BY run
), c AS (
    SELECT run, count(*) AS groups_closed FROM group_closures GROUP BY run
), b AS (
    SELECT run, sum(groups) AS batched_groups FROM batches GROUP BY run
), d AS (
    SELECT run, count(*) AS dropped_groups, count(*) FILTER (WHERE reason = 'infra_lost') AS infra_lost_groups
      FROM batch_drops
     GROUP BY run
)
SELECT a.run,
       a.attempts,
       coalesce(f.infra_failures, 0)                                  AS infra_failures,
       coalesce(f.infra_failures, 0)::double precision / a.attempts  AS infra_failure_rate,
       a.retries,
       coalesce(c.groups_closed, 0)                                   AS groups_closed,
       coalesce(d.infra_lost_groups, 0)                               AS infra_lost_groups,
       coalesce(d.infra_lost_groups, 0)::double precision
           / nullif(coalesce(b.batched_groups, 0) + coalesce(d.dropped_groups, 0), 0) AS infra_lost_rate,
       a.mean_fork_ms,
       a.p50_fork_ms,
       a.p95_fork_ms,
       a.max_fork_ms
  FROM a
  LEFT JOIN f ON f.run = a.run
  LEFT JOIN c ON c.run = a.run
  LEFT JOIN b ON b.run = a.run
  LEFT JOIN d ON d.run = a.run;

-- Infrastructure failures per run and reason.
CREATE VIEW infra_failure_reasons AS
SELECT run,
       reason,
       count(*)                                                       AS failures,
       count(*)::double precision / sum(count(*)) OVER (PARTITION BY run) AS share
  FROM attempt_failures
 GROUP BY run, reason;

-- Token counts and cost of each started attempt, at the run's prices (the
-- '*' row of prices when the run has none). Prompt tokens that were cached
-- are charged at the cached price.
CREATE VIEW attempt_costs AS
WITH st AS (
    SELECT DISTINCT ON (run, attempt) run, attempt, group_id, task, engine, fork_ms
      FROM attempts
     ORDER BY run, attempt, log_offset
), tk AS (
    SELECT run, attempt,
           count(*)                                                   AS turns,
           sum(prompt_tokens)                                         AS prompt_tokens,
           sum(cached_tokens)                                         AS cached_tokens,
           sum(completion_tokens)                                     AS completion_tokens
      FROM turns
     GROUP BY run, attempt
), rw AS (
    SELECT DISTINCT ON (run, attempt) run, attempt, passed
      FROM rewards
     ORDER BY run, attempt, log_offset
), fl AS (
    SELECT DISTINCT run, attempt FROM attempt_failures
), grp AS (
    SELECT DISTINCT ON (run, group_id) run, group_id, purpose
      FROM groups
     ORDER BY run, group_id, log_offset
)
SELECT st.run,
       st.attempt,
       st.task,
       st.group_id,
       grp.purpose,
       coalesce(tk.turns, 0)                                          AS turns,
       coalesce(tk.prompt_tokens, 0)                                  AS prompt_tokens,
       coalesce(tk.cached_tokens, 0)                                  AS cached_tokens,
       coalesce(tk.completion_tokens, 0)                              AS completion_tokens,
       (  (coalesce(tk.prompt_tokens, 0) - coalesce(tk.cached_tokens, 0)) * p.prompt_per_mtok
        + coalesce(tk.cached_tokens, 0) * p.cached_per_mtok
        + coalesce(tk.completion_tokens, 0) * p.completion_per_mtok) / 1e6 AS cost_usd,
       rw.passed,
       fl.attempt IS NOT NULL                                         AS infra_failed,
       p.run                                                          AS priced_by
  FROM st
  LEFT JOIN tk  ON tk.run = st.run AND tk.attempt = st.attempt
  LEFT JOIN rw  ON rw.run = st.run AND rw.attempt = st.attempt
  LEFT JOIN fl  ON fl.run = st.run AND fl.attempt = st.attempt
  LEFT JOIN grp ON grp.run = st.run AND grp.group_id = st.group_id
  LEFT JOIN LATERAL (
      SELECT * FROM prices pr WHERE pr.run IN (st.run, '*') ORDER BY pr.run = '*' LIMIT 1
  ) p ON true;

-- Cost per run and group purpose (purpose '*': the whole run): per attempt,
-- per solve (passed attempt) and per solved task (distinct tasks with at
-- least one passed attempt).
CREATE VIEW run_costs AS
SELECT run,
       coalesce(purpose, '*')                                         AS purpose,
       count(*)                                                       AS attempts,
       count(*) FILTER (WHERE passed)                                 AS solves,
       count(DISTINCT task) FILTER (WHERE passed)                     AS solved_tasks,
       sum(prompt_tokens)                                             AS prompt_tokens,
       sum(cached_tokens)                                             AS cached_tokens,
       sum(completion_tokens)                                         AS completion_tokens,
       sum(cost_usd)                                                  AS cost_usd,
       avg(cost_usd)                                                  AS cost_per_attempt_usd,
       sum(cost_usd) / nullif(count(*) FILTER (WHERE passed), 0)      AS cost_per_solve_usd,
       sum(cost_usd) / nullif(count(DISTINCT task) FILTER (WHERE passed), 0) AS cost_per_solved_task_usd
  FROM attempt_costs
 GROUP BY GROUPING SETS ((run, purpose), (run));

-- +goose Down
DROP VIEW run_costs, attempt_costs, infra_failure_reasons, infra_health, compaction_savings,
    tool_usage, task_solve_rate_by_step, task_metrics, logprob_gap_by_staleness,
    staleness_histogram, step_metrics;
