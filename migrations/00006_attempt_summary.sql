-- One row per run and attempt for the per-attempt views (attempt_costs,
-- run_costs, compaction_savings), kept by statement triggers like the
-- running totals of 00005, so that those views read one row of each of a
-- run's attempts instead of the first of its attempt.started, the first
-- of its reward.computed, its failures and its compactions, each picked
-- out of the facts with DISTINCT ON at query time (6.7 s and 10.5 s for
-- attempt_costs and run_costs on a run of 250 K attempts).
--
-- "First in log order" is kept as the views had it: an attempt's row takes
-- its started and reward columns from the stored fact of that type with the
-- lowest log_offset, whichever order the sink stores them in (a later
-- statement with a lower offset replaces them; facts in one statement are
-- reduced to their first before they reach the row). infra_failed is set by
-- any attempt.failed, and the compaction columns sum every stored
-- context.compacted. A row exists once any of these facts is stored; the
-- views count as started only the rows with a started offset.

-- +goose Up
CREATE TABLE attempt_summary (
    run                     text    NOT NULL,
    attempt                 text    NOT NULL,
    -- The first attempt.started in log order (NULL: none stored yet).
    started_offset          bigint,
    group_id                text,
    task                    text,
    engine                  text,
    fork_ms                 bigint,
    -- The first reward.computed in log order (NULL: none stored yet).
    rewarded_offset         bigint,
    passed                  boolean,
    infra_failed            boolean NOT NULL DEFAULT false,
    compactions             bigint  NOT NULL DEFAULT 0,
    compacted_tokens_before bigint  NOT NULL DEFAULT 0,
    compacted_tokens_after  bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (run, attempt)
);

-- +goose StatementBegin
CREATE FUNCTION summarize_attempts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.attempt_summary AS s (run, attempt, started_offset, group_id, task, engine, fork_ms)
        SELECT DISTINCT ON (run, attempt) run, attempt, log_offset, group_id, task, engine, fork_ms
          FROM new_rows ORDER BY run, attempt, log_offset
        ON CONFLICT (run, attempt) DO UPDATE
           SET started_offset = excluded.started_offset, group_id = excluded.group_id, task = excluded.task,
               engine = excluded.engine, fork_ms = excluded.fork_ms
         WHERE s.started_offset IS NULL OR excluded.started_offset < s.started_offset
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION summarize_rewards() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.attempt_summary AS s (run, attempt, rewarded_offset, passed)
        SELECT DISTINCT ON (run, attempt) run, attempt, log_offset, passed
          FROM new_rows ORDER BY run, attempt, log_offset
        ON CONFLICT (run, attempt) DO UPDATE
           SET rewarded_offset = excluded.rewarded_offset, passed = excluded.passed
         WHERE s.rewarded_offset IS NULL OR excluded.rewarded_offset < s.rewarded_offset
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION summarize_attempt_failures() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.attempt_summary AS s (run, attempt, infra_failed)
        SELECT DISTINCT run, attempt, true FROM new_rows
        ON CONFLICT (run, attempt) DO UPDATE SET infra_failed = true WHERE NOT s.infra_failed
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION summarize_compactions() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.attempt_summary AS s (run, attempt, compactions, compacted_tokens_before, compacted_tokens_after)
        SELECT run, attempt, count(*), sum(tokens_before), sum(tokens_after)
          FROM new_rows GROUP BY run, attempt
        ON CONFLICT (run, attempt) DO UPDATE
           SET compactions = s.compactions + excluded.compactions,
               compacted_tokens_before = s.compacted_tokens_before + excluded.compacted_tokens_before,
               compacted_tokens_after = s.compacted_tokens_after + excluded.compacted_tokens_after
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

CREATE TRIGGER attempts_summary AFTER INSERT ON attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION summarize_attempts();
CREATE TRIGGER rewards_summary AFTER INSERT ON rewards
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION summarize_rewards();
CREATE TRIGGER attempt_failures_summary AFTER INSERT ON attempt_failures
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION summarize_attempt_failures();
CREATE TRIGGER compactions_summary AFTER INSERT ON compactions
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION summarize_compactions();

-- The rows stored before this migration.
INSERT INTO attempt_summary (run, attempt, started_offset, group_id, task, engine, fork_ms,
                             rewarded_offset, passed, infra_failed,
                             compactions, compacted_tokens_before, compacted_tokens_after)
WITH st AS (
    SELECT DISTINCT ON (run, attempt) run, attempt, log_offset, group_id, task, engine, fork_ms
      FROM attempts ORDER BY run, attempt, log_offset
), rw AS (
    SELECT DISTINCT ON (run, attempt) run, attempt, log_offset, passed
      FROM rewards ORDER BY run, attempt, log_offset
), fl AS (
    SELECT DISTINCT run, attempt FROM attempt_failures
), cp AS (
    SELECT run, attempt, count(*) AS n, sum(tokens_before) AS before, sum(tokens_after) AS after
      FROM compactions GROUP BY run, attempt
), keys AS (
    SELECT run, attempt FROM st UNION SELECT run, attempt FROM rw
    UNION SELECT run, attempt FROM fl UNION SELECT run, attempt FROM cp
)
SELECT k.run, k.attempt, st.log_offset, st.group_id, st.task, st.engine, st.fork_ms,
       rw.log_offset, rw.passed, fl.attempt IS NOT NULL,
       coalesce(cp.n, 0), coalesce(cp.before, 0), coalesce(cp.after, 0)
  FROM keys k
  LEFT JOIN st ON st.run = k.run AND st.attempt = k.attempt
  LEFT JOIN rw ON rw.run = k.run AND rw.attempt = k.attempt
  LEFT JOIN fl ON fl.run = k.run AND fl.attempt = k.attempt
  LEFT JOIN cp ON cp.run = k.run AND cp.attempt = k.attempt;

DROP VIEW run_costs, attempt_costs, compaction_savings;

-- Context compaction per run: how many tokens it took out of the context.
CREATE VIEW compaction_savings AS
WITH c AS (
    SELECT run,
           sum(compactions)::bigint                                   AS compactions,
           count(*) FILTER (WHERE compactions > 0)                    AS attempts_compacted,
           nullif(count(*) FILTER (WHERE started_offset IS NOT NULL), 0) AS attempts,
           sum(compacted_tokens_before)                               AS tokens_before,
           sum(compacted_tokens_after)                                AS tokens_after
      FROM attempt_summary
     GROUP BY run
    HAVING sum(compactions) > 0
)
SELECT run,
       compactions,
       attempts_compacted,
       attempts,
       attempts_compacted::double precision / attempts                AS compacted_attempt_fraction,
       tokens_before,
       tokens_after,
       tokens_before - tokens_after                                   AS tokens_saved,
       1 - tokens_after::double precision / nullif(tokens_before, 0)  AS saved_fraction,
       (tokens_before - tokens_after)::double precision / compactions AS mean_saved_per_compaction
  FROM c;

-- Token counts and cost of each started attempt, at the run's prices (the
-- '*' row of prices when the run has none). Prompt tokens that were cached
-- are charged at the cached price.
CREATE VIEW attempt_costs AS
WITH grp AS (
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
       st.passed,
       st.infra_failed,
       coalesce(pr.run, pd.run)                                       AS priced_by
  FROM attempt_summary st
  LEFT JOIN attempt_tokens tk ON tk.run = st.run AND tk.attempt = st.attempt
  LEFT JOIN grp ON grp.run = st.run AND grp.group_id = st.group_id
  LEFT JOIN prices pr ON pr.run = st.run
  LEFT JOIN prices pd ON pd.run = '*'
 WHERE st.started_offset IS NOT NULL;

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
DROP VIEW run_costs, attempt_costs, compaction_savings;
DROP TRIGGER compactions_summary ON compactions;
DROP TRIGGER attempt_failures_summary ON attempt_failures;
DROP TRIGGER rewards_summary ON rewards;
DROP TRIGGER attempts_summary ON attempts;
DROP FUNCTION summarize_compactions(), summarize_attempt_failures(), summarize_rewards(), summarize_attempts();
DROP TABLE attempt_summary;

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
