-- The analysts' queries on one run of 50 M facts (623 K attempts, 23 M
-- turns), where three of them passed a second:
--
-- - attempt_costs and run_costs joined each of a run's attempt_summary rows
--   to attempt_tokens and to its group's first groups row, hashing 623 K
--   rows twice (run_costs reads attempt_costs twice: per purpose and for
--   the whole run), 1.6 s. attempt_summary now carries the attempt's turn
--   and token totals (kept from turns by the trigger that kept
--   attempt_tokens, which becomes a view of them) and its group's purpose,
--   so both views read one row per attempt and no other table but prices;
--   and run_costs prices the sums of a run's tokens, not each attempt.
-- - The multi-segment turns query chose a scan of every turn over its
--   partial index: with no statistics on cardinality(segment_versions) the
--   planner guessed a third of the run's turns had more than one segment
--   (6.5 M of 23 M; 150 K do). Statistics on that expression fix the guess
--   (statistics on expressions need PostgreSQL 14 or later).
--
-- The purpose is the one of the group's first group.started in log order,
-- as the views had it, whichever order the sink stores the facts in: an
-- attempt stored after its group takes the purpose when its start is
-- stored; a group stored after its attempts (or a group.started of lower
-- offset stored later, with another purpose) sets it on the attempts that
-- name the group, through attempt_summary_group.

-- +goose Up
CREATE STATISTICS turns_segment_count ON (cardinality(segment_versions)) FROM turns;
ANALYZE turns;

ALTER TABLE attempt_summary
    ADD COLUMN purpose           text,
    ADD COLUMN turns             bigint NOT NULL DEFAULT 0,
    ADD COLUMN prompt_tokens     bigint NOT NULL DEFAULT 0,
    ADD COLUMN cached_tokens     bigint NOT NULL DEFAULT 0,
    ADD COLUMN completion_tokens bigint NOT NULL DEFAULT 0;

-- The rows stored before this migration.
INSERT INTO attempt_summary AS s (run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens)
SELECT run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens FROM attempt_tokens
ON CONFLICT (run, attempt) DO UPDATE
   SET turns = excluded.turns, prompt_tokens = excluded.prompt_tokens,
       cached_tokens = excluded.cached_tokens, completion_tokens = excluded.completion_tokens;
UPDATE attempt_summary s SET purpose = g.purpose
  FROM (SELECT DISTINCT ON (run, group_id) run, group_id, purpose FROM groups ORDER BY run, group_id, log_offset) g
 WHERE s.run = g.run AND s.group_id = g.group_id;
CREATE INDEX attempt_summary_group ON attempt_summary (run, group_id);

DROP VIEW run_costs, attempt_costs;
DROP TRIGGER turns_tally ON turns;
DROP FUNCTION tally_turns();
DROP TABLE attempt_tokens;
CREATE VIEW attempt_tokens AS
SELECT run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens
  FROM attempt_summary
 WHERE turns > 0;

-- +goose StatementBegin
CREATE FUNCTION tally_turns() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %I.attempt_summary AS s (run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens)
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

-- An attempt's first start, as 00006 keeps it, now with its group's
-- purpose as stored so far.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION summarize_attempts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        INSERT INTO %1$I.attempt_summary AS s (run, attempt, started_offset, group_id, task, engine, fork_ms, purpose)
        SELECT n.run, n.attempt, n.log_offset, n.group_id, n.task, n.engine, n.fork_ms,
               (SELECT g.purpose FROM %1$I.groups g WHERE g.run = n.run AND g.group_id = n.group_id
                 ORDER BY g.log_offset LIMIT 1)
          FROM (SELECT DISTINCT ON (run, attempt) run, attempt, log_offset, group_id, task, engine, fork_ms
                  FROM new_rows ORDER BY run, attempt, log_offset) n
        ON CONFLICT (run, attempt) DO UPDATE
           SET started_offset = excluded.started_offset, group_id = excluded.group_id, task = excluded.task,
               engine = excluded.engine, fork_ms = excluded.fork_ms, purpose = excluded.purpose
         WHERE s.started_offset IS NULL OR excluded.started_offset < s.started_offset
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- A group stored: the attempts that name it take the purpose of its first
-- group.started in log order, which this statement may have changed.
-- +goose StatementBegin
CREATE FUNCTION summarize_groups() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format($q$
        UPDATE %1$I.attempt_summary s SET purpose = f.purpose
          FROM (SELECT DISTINCT ON (g.run, g.group_id) g.run, g.group_id, g.purpose
                  FROM %1$I.groups g
                  JOIN (SELECT DISTINCT run, group_id FROM new_rows) n ON n.run = g.run AND n.group_id = g.group_id
                 ORDER BY g.run, g.group_id, g.log_offset) f
         WHERE s.run = f.run AND s.group_id = f.group_id AND s.purpose IS DISTINCT FROM f.purpose
    $q$, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

CREATE TRIGGER turns_tally AFTER INSERT ON turns
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_turns();
CREATE TRIGGER groups_summary AFTER INSERT ON groups
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION summarize_groups();

-- Token counts and cost of each started attempt, at the run's prices (the
-- '*' row of prices when the run has none). Prompt tokens that were cached
-- are charged at the cached price.
CREATE VIEW attempt_costs AS
SELECT st.run,
       st.attempt,
       st.task,
       st.group_id,
       st.purpose,
       st.turns,
       st.prompt_tokens,
       st.cached_tokens,
       st.completion_tokens,
       (  (st.prompt_tokens - st.cached_tokens)
              * CASE WHEN pr.run IS NOT NULL THEN pr.prompt_per_mtok ELSE pd.prompt_per_mtok END
        + st.cached_tokens
              * CASE WHEN pr.run IS NOT NULL THEN pr.cached_per_mtok ELSE pd.cached_per_mtok END
        + st.completion_tokens
              * CASE WHEN pr.run IS NOT NULL THEN pr.completion_per_mtok ELSE pd.completion_per_mtok END
       ) / 1e6                                                        AS cost_usd,
       st.passed,
       st.infra_failed,
       coalesce(pr.run, pd.run)                                       AS priced_by
  FROM attempt_summary st
  LEFT JOIN prices pr ON pr.run = st.run
  LEFT JOIN prices pd ON pd.run = '*'
 WHERE st.started_offset IS NOT NULL;

-- Cost per run and group purpose (purpose '*': the whole run): per attempt,
-- per solve (passed attempt) and per solved task (distinct tasks with at
-- least one passed attempt). A run's attempts are priced alike, so the
-- tokens are summed first and priced once per row, not once per attempt.
CREATE VIEW run_costs AS
SELECT t.run,
       t.purpose,
       t.attempts,
       t.solves,
       t.solved_tasks,
       t.prompt_tokens,
       t.cached_tokens,
       t.completion_tokens,
       c.cost_usd,
       c.cost_usd / t.attempts                                        AS cost_per_attempt_usd,
       c.cost_usd / nullif(t.solves, 0)                               AS cost_per_solve_usd,
       c.cost_usd / nullif(t.solved_tasks, 0)                         AS cost_per_solved_task_usd
  FROM (SELECT run,
               coalesce(purpose, '*')                                 AS purpose,
               count(*)                                               AS attempts,
               count(*) FILTER (WHERE passed)                         AS solves,
               count(DISTINCT task) FILTER (WHERE passed)             AS solved_tasks,
               sum(prompt_tokens)                                     AS prompt_tokens,
               sum(cached_tokens)                                     AS cached_tokens,
               sum(completion_tokens)                                 AS completion_tokens
          FROM attempt_summary
         WHERE started_offset IS NOT NULL
         GROUP BY run, purpose
        UNION ALL
        SELECT run,
               '*',
               count(*),
               count(*) FILTER (WHERE passed),
               count(DISTINCT task) FILTER (WHERE passed),
               sum(prompt_tokens),
               sum(cached_tokens),
               sum(completion_tokens)
          FROM attempt_summary
         WHERE started_offset IS NOT NULL
         GROUP BY run) t
  LEFT JOIN prices pr ON pr.run = t.run
  LEFT JOIN prices pd ON pd.run = '*'
 CROSS JOIN LATERAL (
        SELECT (  (t.prompt_tokens - t.cached_tokens)::double precision
                      * CASE WHEN pr.run IS NOT NULL THEN pr.prompt_per_mtok ELSE pd.prompt_per_mtok END
                + t.cached_tokens::double precision
                      * CASE WHEN pr.run IS NOT NULL THEN pr.cached_per_mtok ELSE pd.cached_per_mtok END
                + t.completion_tokens::double precision
                      * CASE WHEN pr.run IS NOT NULL THEN pr.completion_per_mtok ELSE pd.completion_per_mtok END
               ) / 1e6                                                AS cost_usd) c;

-- +goose Down
DROP VIEW run_costs, attempt_costs;
DROP TRIGGER groups_summary ON groups;
DROP FUNCTION summarize_groups();
DROP TRIGGER turns_tally ON turns;
DROP FUNCTION tally_turns();
DROP VIEW attempt_tokens;
CREATE TABLE attempt_tokens (
    run               text   NOT NULL,
    attempt           text   NOT NULL,
    turns             bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    cached_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    PRIMARY KEY (run, attempt)
);
INSERT INTO attempt_tokens (run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens)
SELECT run, attempt, turns, prompt_tokens, cached_tokens, completion_tokens FROM attempt_summary WHERE turns > 0;

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
CREATE OR REPLACE FUNCTION summarize_attempts() RETURNS trigger LANGUAGE plpgsql AS $fn$
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

CREATE TRIGGER turns_tally AFTER INSERT ON turns
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_turns();

DROP INDEX attempt_summary_group;
ALTER TABLE attempt_summary
    DROP COLUMN purpose, DROP COLUMN turns, DROP COLUMN prompt_tokens,
    DROP COLUMN cached_tokens, DROP COLUMN completion_tokens;
DROP STATISTICS turns_segment_count;

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
