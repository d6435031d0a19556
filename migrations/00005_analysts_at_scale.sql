-- The analysts' queries at the size of a large run (tens of millions of
-- facts): every documented query reads the rows of its run only, and none
-- aggregates a run's millions of turns, tool calls or judged turns when it
-- is asked.
--
-- - Running totals, kept by statement triggers in the transaction that
--   inserts the rows, so they count exactly the stored rows (a duplicate the
--   sink drops never reaches them), whether rows arrive by the sink's COPY,
--   its INSERT ... ON CONFLICT, or a rebuild: batch_staleness (judged turns
--   per run, step and staleness, from the batch.sealed decisions),
--   attempt_tokens (turns and tokens per run and attempt) and tool_totals
--   (tool calls per run and tool). The sink only inserts, so the totals
--   only grow. The trigger functions name the tables through the schema of
--   the table that fired them, so a schema renamed by a rebuild keeps
--   working.
-- - The views that aggregated those rows read the totals; the views that
--   grouped by GROUPING SETS (which keeps a filter on run out of the
--   aggregate, so it ran over every run in the database) are a UNION ALL of
--   plain GROUP BYs, into each of which the run filter reaches.
-- - attempt_costs joins prices by hash instead of a lateral lookup per
--   attempt.
-- - The indexes the documented joins and filters use: turns by log
--   position (batch_turns -> turns), a run's multi-segment turns, task
--   gates through their task.

-- +goose Up
CREATE INDEX turns_position ON turns (log_partition, log_offset);
CREATE INDEX turns_run_multi_segment ON turns (run, log_offset) WHERE cardinality(segment_versions) > 1;

CREATE TABLE batch_staleness (
    run           text   NOT NULL,
    batch         bigint NOT NULL,
    staleness     bigint NOT NULL,
    turns         bigint NOT NULL,
    trained_turns bigint NOT NULL,
    PRIMARY KEY (run, batch, staleness)
);
CREATE TABLE attempt_tokens (
    run               text   NOT NULL,
    attempt           text   NOT NULL,
    turns             bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    cached_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    PRIMARY KEY (run, attempt)
);
CREATE TABLE tool_totals (
    run                  text   NOT NULL,
    tool                 text   NOT NULL,
    calls                bigint NOT NULL,
    failures             bigint NOT NULL,
    timeouts             bigint NOT NULL,
    to_file              bigint NOT NULL,
    background           bigint NOT NULL,
    duration_ms          bigint NOT NULL,
    output_bytes         bigint NOT NULL,
    output_bytes_to_file bigint NOT NULL,
    PRIMARY KEY (run, tool)
);

-- +goose StatementBegin
CREATE FUNCTION tally_batch_turns() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.batch_staleness AS s (run, batch, staleness, turns, trained_turns)
        SELECT run, batch, staleness, count(*), count(*) FILTER (WHERE trained)
          FROM new_rows GROUP BY run, batch, staleness
        ON CONFLICT (run, batch, staleness) DO UPDATE
           SET turns = s.turns + excluded.turns, trained_turns = s.trained_turns + excluded.trained_turns
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION tally_turns() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.attempt_tokens AS s (run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens)
        SELECT run, attempt, count(*), sum(prompt_tokens), sum(cached_tokens), sum(completion_tokens)
          FROM new_rows GROUP BY run, attempt
        ON CONFLICT (run, attempt) DO UPDATE
           SET turns = s.turns + excluded.turns,
               prompt_tokens = s.prompt_tokens + excluded.prompt_tokens,
               cached_tokens = s.cached_tokens + excluded.cached_tokens,
               completion_tokens = s.completion_tokens + excluded.completion_tokens
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION tally_tool_calls() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.tool_totals AS s (run, tool, calls, failures, timeouts, to_file, background,
                                         duration_ms, output_bytes, output_bytes_to_file)
        SELECT run, tool, count(*), count(*) FILTER (WHERE exit_code <> 0), count(*) FILTER (WHERE timed_out),
               count(*) FILTER (WHERE to_file), count(*) FILTER (WHERE background),
               sum(duration_ms), sum(output_bytes), coalesce(sum(output_bytes) FILTER (WHERE to_file), 0)
          FROM new_rows GROUP BY run, tool
        ON CONFLICT (run, tool) DO UPDATE
           SET calls = s.calls + excluded.calls,
               failures = s.failures + excluded.failures,
               timeouts = s.timeouts + excluded.timeouts,
               to_file = s.to_file + excluded.to_file,
               background = s.background + excluded.background,
               duration_ms = s.duration_ms + excluded.duration_ms,
               output_bytes = s.output_bytes + excluded.output_bytes,
               output_bytes_to_file = s.output_bytes_to_file + excluded.output_bytes_to_file
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

CREATE TRIGGER batch_turns_tally AFTER INSERT ON batch_turns
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_batch_turns();
CREATE TRIGGER turns_tally AFTER INSERT ON turns
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_turns();
CREATE TRIGGER tool_calls_tally AFTER INSERT ON tool_calls
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_tool_calls();

-- The rows stored before this migration.
INSERT INTO batch_staleness (run, batch, staleness, turns, trained_turns)
SELECT run, batch, staleness, count(*), count(*) FILTER (WHERE trained)
  FROM batch_turns GROUP BY run, batch, staleness;
INSERT INTO attempt_tokens (run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens)
SELECT run, attempt, count(*), sum(prompt_tokens), sum(cached_tokens), sum(completion_tokens)
  FROM turns GROUP BY run, attempt;
INSERT INTO tool_totals (run, tool, calls, failures, timeouts, to_file, background,
                         duration_ms, output_bytes, output_bytes_to_file)
SELECT run, tool, count(*), count(*) FILTER (WHERE exit_code <> 0), count(*) FILTER (WHERE timed_out),
       count(*) FILTER (WHERE to_file), count(*) FILTER (WHERE background),
       sum(duration_ms), sum(output_bytes), coalesce(sum(output_bytes) FILTER (WHERE to_file), 0)
  FROM tool_calls GROUP BY run, tool;

DROP VIEW run_costs, attempt_costs, tool_usage, task_metrics, logprob_gap_by_staleness,
    staleness_histogram, step_metrics;

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
           sum(turns)::bigint                                    AS turns,
           sum(trained_turns)::bigint                            AS trained_turns,
           (sum(staleness * turns)::numeric / sum(turns))::double precision AS mean_staleness,
           max(staleness)                                        AS max_staleness
      FROM batch_staleness
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
       turns,
       trained_turns,
       turns::double precision / sum(turns) OVER (PARTITION BY run, batch) AS share
  FROM batch_staleness;

-- The trainer's reported log-prob gap per step and staleness, beside the
-- number of the step's turns at that staleness.
CREATE VIEW logprob_gap_by_staleness AS
WITH grad AS (
    SELECT DISTINCT ON (run, batch) run, batch, event_id
      FROM gradient_steps
     ORDER BY run, batch, log_offset
)
SELECT g.run,
       g.batch                                                        AS step,
       l.staleness,
       l.gap,
       coalesce(h.turns, 0)                                           AS turns
  FROM grad g
  JOIN gradient_logprob_gaps l ON l.event_id = g.event_id
  LEFT JOIN batch_staleness h ON h.run = g.run AND h.batch = g.batch AND h.staleness = l.staleness;

CREATE VIEW task_metrics AS
WITH keys AS (
    SELECT run, task FROM tasks
    UNION SELECT run, task FROM admissions
    UNION SELECT run, task FROM batch_groups
), reg AS (
    SELECT DISTINCT ON (run, task) run, task, source, kind, tier, event_id
      FROM tasks
     ORDER BY run, task, log_offset
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
  LEFT JOIN LATERAL (
      SELECT count(*) AS gates, count(*) FILTER (WHERE passed) AS gates_passed
        FROM task_gates
       WHERE event_id = r.event_id
      HAVING count(*) > 0
  ) gt ON true
  LEFT JOIN adm ad     ON ad.run = k.run AND ad.task = k.task
  LEFT JOIN trained tr ON tr.run = k.run AND tr.task = k.task;

-- Tool calls per run and tool; tool '*' is the run's total. A failure is a
-- non-zero exit code (timeouts included).
CREATE VIEW tool_usage AS
SELECT run, tool, calls, failures,
       failures::double precision / calls                             AS failure_rate,
       timeouts,
       timeouts::double precision / calls                             AS timeout_rate,
       to_file,
       to_file::double precision / calls                              AS to_file_rate,
       background,
       background::double precision / calls                           AS background_rate,
       (duration_ms::numeric / calls)::double precision               AS mean_duration_ms,
       output_bytes::numeric                                          AS output_bytes,
       output_bytes_to_file::numeric                                  AS output_bytes_to_file
  FROM tool_totals
UNION ALL
SELECT run, '*', sum(calls)::bigint, sum(failures)::bigint,
       sum(failures)::double precision / sum(calls),
       sum(timeouts)::bigint,
       sum(timeouts)::double precision / sum(calls),
       sum(to_file)::bigint,
       sum(to_file)::double precision / sum(calls),
       sum(background)::bigint,
       sum(background)::double precision / sum(calls),
       (sum(duration_ms) / sum(calls))::double precision,
       sum(output_bytes),
       sum(output_bytes_to_file)
  FROM tool_totals
 GROUP BY run;

-- Token counts and cost of each started attempt, at the run's prices (the
-- '*' row of prices when the run has none). Prompt tokens that were cached
-- are charged at the cached price.
CREATE VIEW attempt_costs AS
WITH st AS (
    SELECT DISTINCT ON (run, attempt) run, attempt, group_id, task, engine, fork_ms
      FROM attempts
     ORDER BY run, attempt, log_offset
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
       (  (coalesce(tk.prompt_tokens, 0) - coalesce(tk.cached_tokens, 0))
              * CASE WHEN pr.run IS NOT NULL THEN pr.prompt_per_mtok ELSE pd.prompt_per_mtok END
        + coalesce(tk.cached_tokens, 0)
              * CASE WHEN pr.run IS NOT NULL THEN pr.cached_per_mtok ELSE pd.cached_per_mtok END
        + coalesce(tk.completion_tokens, 0)
              * CASE WHEN pr.run IS NOT NULL THEN pr.completion_per_mtok ELSE pd.completion_per_mtok END
       ) / 1e6                                                        AS cost_usd,
       rw.passed,
       fl.attempt IS NOT NULL                                         AS infra_failed,
       coalesce(pr.run, pd.run)                                       AS priced_by
  FROM st
  LEFT JOIN attempt_tokens tk ON tk.run = st.run AND tk.attempt = st.attempt
  LEFT JOIN rw  ON rw.run = st.run AND rw.attempt = st.attempt
  LEFT JOIN fl  ON fl.run = st.run AND fl.attempt = st.attempt
  LEFT JOIN grp ON grp.run = st.run AND grp.group_id = st.group_id
  LEFT JOIN prices pr ON pr.run = st.run
  LEFT JOIN prices pd ON pd.run = '*';

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
 GROUP BY run, purpose
UNION ALL
SELECT run,
       '*',
       count(*),
       count(*) FILTER (WHERE passed),
       count(DISTINCT task) FILTER (WHERE passed),
       sum(prompt_tokens),
       sum(cached_tokens),
       sum(completion_tokens),
       sum(cost_usd),
       avg(cost_usd),
       sum(cost_usd) / nullif(count(*) FILTER (WHERE passed), 0),
       sum(cost_usd) / nullif(count(DISTINCT task) FILTER (WHERE passed), 0)
  FROM attempt_costs
 GROUP BY run;

-- +goose Down
DROP VIEW run_costs, attempt_costs, tool_usage, task_metrics, logprob_gap_by_staleness,
    staleness_histogram, step_metrics;
DROP TRIGGER tool_calls_tally ON tool_calls;
DROP TRIGGER turns_tally ON turns;
DROP TRIGGER batch_turns_tally ON batch_turns;
DROP FUNCTION tally_tool_calls(), tally_turns(), tally_batch_turns();
DROP TABLE tool_totals, attempt_tokens, batch_staleness;
DROP INDEX turns_run_multi_segment, turns_position;

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

CREATE VIEW staleness_histogram AS
SELECT run,
       batch                                                          AS step,
       staleness,
       count(*)                                                       AS turns,
       count(*) FILTER (WHERE trained)                                AS trained_turns,
       count(*)::double precision / sum(count(*)) OVER (PARTITION BY run, batch) AS share
  FROM batch_turns
 GROUP BY run, batch, staleness;

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
