-- The read model's tables: one per fact type, one per decision shape, and
-- the sink's own bookkeeping. See docs/analysts.md for what each holds.
--
-- Keys. A fact table's key is the fact's event id (the producer's
-- idempotency key): a repeated delivery of one fact lands once, and two
-- facts with different ids are two rows even when they describe the same
-- entity (the projections ignore the second and say so in audit_findings).
-- Decision tables are keyed by the decision id (batches by run and seq as
-- well); decision ids are deterministic, so a re-emitted decision is the
-- same row.
--
-- Foreign keys. Facts from different producers reach the log in any order
-- (an attempt's turns before its attempt.started, a reward before the
-- attempt ends), and the facts and decisions topics are consumed
-- independently, so no key between two fact tables, and none from a
-- decision to a fact, can be enforced: a row would be refused for arriving
-- before its parent. Foreign keys are declared only where both rows come
-- from the same record and so are written in the same transaction: a
-- task's gates, a gradient step's log-prob gaps, and a batch's groups,
-- attempts, turns and drops.
--
-- Every fact row carries where it was read: log_partition and log_offset in
-- the facts topic. A run's facts share one partition, so within a run
-- log_offset is the log order the projections fold in.

-- +goose Up

-- run.started
CREATE TABLE runs (
    event_id           uuid PRIMARY KEY,
    run                text        NOT NULL,
    producer           text        NOT NULL,
    at                 timestamptz NOT NULL,
    log_partition      integer     NOT NULL,
    log_offset         bigint      NOT NULL,
    model              text        NOT NULL,
    harness            text        NOT NULL,
    notes              text        NOT NULL,
    -- The effective configuration (declared values, defaults for the rest)
    -- and the declaration itself.
    group_size         integer          NOT NULL,
    batch_groups       integer          NOT NULL,
    min_group          integer          NOT NULL,
    max_staleness      integer          NOT NULL,
    pass_band_low      double precision NOT NULL,
    pass_band_high     double precision NOT NULL,
    min_probes         integer          NOT NULL,
    enforce_admission  boolean          NOT NULL,
    partial_credit_cap double precision NOT NULL,
    efficiency_weight  double precision NOT NULL,
    advantage          text             NOT NULL,
    config             jsonb            NOT NULL
);
CREATE INDEX runs_run ON runs (run, log_offset);

-- task.registered
CREATE TABLE tasks (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    task          text        NOT NULL,
    source        text        NOT NULL,
    kind          text        NOT NULL,
    tier          bigint      NOT NULL
);
CREATE INDEX tasks_run_task ON tasks (run, task, log_offset);

-- The gates of a task.registered, in declaration order.
CREATE TABLE task_gates (
    event_id uuid    NOT NULL REFERENCES tasks (event_id) ON DELETE CASCADE,
    ordinal  integer NOT NULL,
    name     text    NOT NULL,
    passed   boolean NOT NULL,
    PRIMARY KEY (event_id, ordinal)
);

-- group.started
CREATE TABLE groups (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    group_id      text        NOT NULL,
    task          text        NOT NULL,
    size          bigint      NOT NULL,
    purpose       text        NOT NULL
);
CREATE INDEX groups_run_group ON groups (run, group_id, log_offset);
CREATE INDEX groups_run_task ON groups (run, task);

-- group.closed
CREATE TABLE group_closures (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    group_id      text        NOT NULL,
    reason        text        NOT NULL
);
CREATE INDEX group_closures_run_group ON group_closures (run, group_id);

-- attempt.started
CREATE TABLE attempts (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    attempt       text        NOT NULL,
    group_id      text        NOT NULL,
    task          text        NOT NULL,
    engine        text        NOT NULL,
    vm            text        NOT NULL,
    fork_ms       bigint      NOT NULL,
    retry_of      text -- NULL when the attempt retries nothing
);
CREATE INDEX attempts_run_attempt ON attempts (run, attempt, log_offset);
CREATE INDEX attempts_run_group ON attempts (run, group_id);

-- attempt.finished: how the model ended the attempt.
CREATE TABLE attempt_outcomes (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    attempt       text        NOT NULL,
    outcome       text        NOT NULL
);
CREATE INDEX attempt_outcomes_run_attempt ON attempt_outcomes (run, attempt);

-- attempt.failed: an infrastructure failure, not the model's fault.
CREATE TABLE attempt_failures (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    attempt       text        NOT NULL,
    reason        text        NOT NULL
);
CREATE INDEX attempt_failures_run_attempt ON attempt_failures (run, attempt);

-- turn.generated, without its token arrays: their lengths only.
CREATE TABLE turns (
    event_id           uuid PRIMARY KEY,
    run                text        NOT NULL,
    producer           text        NOT NULL,
    at                 timestamptz NOT NULL,
    log_partition      integer     NOT NULL,
    log_offset         bigint      NOT NULL,
    attempt            text        NOT NULL,
    turn               bigint      NOT NULL,
    policy_version     bigint      NOT NULL,
    prompt_tokens      bigint      NOT NULL,
    completion_tokens  bigint      NOT NULL,
    cached_tokens      bigint      NOT NULL,
    observation_tokens bigint      NOT NULL, -- length of observation_token_ids
    inline_tokens      bigint      NOT NULL, -- length of token_ids (0 when not inlined)
    finish             text        NOT NULL,
    latency_ms         bigint      NOT NULL
);
CREATE INDEX turns_run_attempt ON turns (run, attempt, turn);

-- tool.called
CREATE TABLE tool_calls (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    attempt       text        NOT NULL,
    turn          bigint      NOT NULL,
    call          bigint      NOT NULL,
    tool          text        NOT NULL,
    exit_code     bigint      NOT NULL,
    duration_ms   bigint      NOT NULL,
    output_bytes  bigint      NOT NULL,
    to_file       boolean     NOT NULL,
    background    boolean     NOT NULL,
    timed_out     boolean     NOT NULL
);
CREATE INDEX tool_calls_run_tool ON tool_calls (run, tool);
CREATE INDEX tool_calls_run_attempt ON tool_calls (run, attempt, turn);

-- context.compacted
CREATE TABLE compactions (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    attempt       text        NOT NULL,
    turn          bigint      NOT NULL,
    tokens_before bigint      NOT NULL,
    tokens_after  bigint      NOT NULL
);
CREATE INDEX compactions_run_attempt ON compactions (run, attempt);

-- reward.computed
CREATE TABLE rewards (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    attempt       text        NOT NULL,
    passed        boolean     NOT NULL,
    tests_passed  bigint      NOT NULL,
    tests_total   bigint      NOT NULL,
    verifier      text        NOT NULL
);
CREATE INDEX rewards_run_attempt ON rewards (run, attempt, log_offset);

-- policy.published
CREATE TABLE policy_versions (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    version       bigint      NOT NULL,
    checkpoint    text        NOT NULL,
    digest        text        NOT NULL,
    precision     text        NOT NULL
);
CREATE INDEX policy_versions_run_version ON policy_versions (run, version);

-- gradient.applied
CREATE TABLE gradient_steps (
    event_id           uuid PRIMARY KEY,
    run                text             NOT NULL,
    producer           text             NOT NULL,
    at                 timestamptz      NOT NULL,
    log_partition      integer          NOT NULL,
    log_offset         bigint           NOT NULL,
    step               bigint           NOT NULL,
    batch              bigint           NOT NULL,
    batch_digest       text             NOT NULL,
    from_version       bigint           NOT NULL,
    to_version         bigint           NOT NULL,
    loss               double precision NOT NULL,
    trained_tokens     bigint           NOT NULL,
    truncated_fraction double precision NOT NULL,
    grad_norm          double precision NOT NULL
);
CREATE INDEX gradient_steps_run_batch ON gradient_steps (run, batch, log_offset);

-- The logprob_gap map of a gradient.applied: mean absolute gap between
-- trainer and rollout log-probs, by staleness.
CREATE TABLE gradient_logprob_gaps (
    event_id  uuid             NOT NULL REFERENCES gradient_steps (event_id) ON DELETE CASCADE,
    staleness bigint           NOT NULL,
    gap       double precision NOT NULL,
    PRIMARY KEY (event_id, staleness)
);

-- task.admitted and task.rejected decisions. A decision's envelope does not
-- carry its sequence number (only its id, derived from it); decisions of a
-- run are in one partition of the decisions topic, so log_offset orders
-- them as the projector concluded them.
CREATE TABLE admissions (
    decision_id    uuid             PRIMARY KEY,
    run            text             NOT NULL,
    decision       text             NOT NULL CHECK (decision IN ('admitted', 'rejected')),
    task           text             NOT NULL,
    probes         bigint           NOT NULL,
    passes         bigint           NOT NULL,
    pass_rate      double precision NOT NULL,
    rule_version   integer          NOT NULL,
    fact_seq       bigint           NOT NULL, -- the fact that decided it
    fact_partition integer          NOT NULL,
    fact_offset    bigint           NOT NULL,
    log_partition  integer          NOT NULL, -- where the decision is in the decisions topic
    log_offset     bigint           NOT NULL
);
CREATE INDEX admissions_run_task ON admissions (run, task);

-- batch.sealed decisions: one row per batch (= gradient step seq).
CREATE TABLE batches (
    run                 text    NOT NULL,
    seq                 bigint  NOT NULL,
    decision_id         uuid    NOT NULL UNIQUE,
    trainer_version     bigint  NOT NULL,
    rule_version        integer NOT NULL,
    watermark_partition integer NOT NULL,
    watermark_offset    bigint  NOT NULL,
    tree_size           bigint  NOT NULL,
    tree_root           text    NOT NULL,
    digest              text    NOT NULL,
    groups              bigint  NOT NULL,
    attempts            bigint  NOT NULL,
    turns               bigint  NOT NULL,
    trained_turns       bigint  NOT NULL,
    fact_seq            bigint  NOT NULL,
    fact_partition      integer NOT NULL,
    fact_offset         bigint  NOT NULL,
    log_partition       integer NOT NULL,
    log_offset          bigint  NOT NULL,
    PRIMARY KEY (run, seq)
);

-- The groups a batch trains, in manifest order.
CREATE TABLE batch_groups (
    run                 text    NOT NULL,
    batch               bigint  NOT NULL,
    group_id            text    NOT NULL,
    ordinal             integer NOT NULL,
    task                text    NOT NULL,
    completed_partition integer NOT NULL,
    completed_offset    bigint  NOT NULL,
    PRIMARY KEY (run, batch, group_id),
    FOREIGN KEY (run, batch) REFERENCES batches (run, seq) ON DELETE CASCADE
);
CREATE INDEX batch_groups_run_task ON batch_groups (run, task);

-- An attempt included in a batch, with its reward arithmetic. in_flight
-- and in_queue are the batch's staleness split (docs/design.md §6.7): last
-- minus first turn's policy version, and (batch - 1) minus the last one.
CREATE TABLE batch_attempts (
    run               text             NOT NULL,
    batch             bigint           NOT NULL,
    group_id          text             NOT NULL,
    attempt           text             NOT NULL,
    score             double precision NOT NULL,
    bonus             double precision NOT NULL,
    reward            double precision NOT NULL,
    advantage         double precision NOT NULL,
    completion_tokens bigint           NOT NULL,
    turns             bigint           NOT NULL,
    trained_turns     bigint           NOT NULL,
    in_flight         bigint, -- NULL for an attempt without turns
    in_queue          bigint,
    PRIMARY KEY (run, batch, attempt),
    FOREIGN KEY (run, batch, group_id) REFERENCES batch_groups (run, batch, group_id) ON DELETE CASCADE
);

-- A turn judged against its batch.
CREATE TABLE batch_turns (
    run            text    NOT NULL,
    batch          bigint  NOT NULL,
    attempt        text    NOT NULL,
    turn           bigint  NOT NULL,
    policy_version bigint  NOT NULL,
    staleness      bigint  NOT NULL,
    trained        boolean NOT NULL,
    turn_partition integer NOT NULL, -- where its turn.generated is
    turn_offset    bigint  NOT NULL,
    PRIMARY KEY (run, batch, attempt, turn),
    FOREIGN KEY (run, batch, attempt) REFERENCES batch_attempts (run, batch, attempt) ON DELETE CASCADE
);
CREATE INDEX batch_turns_run_staleness ON batch_turns (run, staleness);

-- Train groups that completed since the previous batch and were not used.
CREATE TABLE batch_drops (
    run      text    NOT NULL,
    batch    bigint  NOT NULL,
    ordinal  integer NOT NULL, -- completion order
    group_id text    NOT NULL,
    task     text    NOT NULL,
    reason   text    NOT NULL,
    PRIMARY KEY (run, batch, ordinal),
    FOREIGN KEY (run, batch) REFERENCES batches (run, seq) ON DELETE CASCADE
);
CREATE INDEX batch_drops_run_task ON batch_drops (run, task);

-- audit.finding decisions.
CREATE TABLE audit_findings (
    decision_id    uuid     PRIMARY KEY,
    run            text     NOT NULL,
    kind           text     NOT NULL,
    detail         text     NOT NULL,
    event_id       text, -- the fact the finding is about, when it names one
    fact_type      text,
    task           text,
    group_id       text,
    attempt        text,
    turns          bigint[],
    batch          bigint,
    want           text,
    got            text,
    rule_version   integer  NOT NULL,
    fact_seq       bigint   NOT NULL,
    fact_partition integer  NOT NULL,
    fact_offset    bigint   NOT NULL,
    log_partition  integer  NOT NULL,
    log_offset     bigint   NOT NULL
);
CREATE INDEX audit_findings_run_kind ON audit_findings (run, kind);
CREATE INDEX audit_findings_run_position ON audit_findings (run, log_offset);

-- audit.checkpoint decisions: every 10,000 facts of a run, the head of its
-- fact tree and the decisions issued so far, by kind.
CREATE TABLE audit_checkpoints (
    decision_id    uuid    PRIMARY KEY,
    run            text    NOT NULL,
    tree_size      bigint  NOT NULL,
    tree_root      text    NOT NULL,
    decisions      jsonb   NOT NULL,
    rule_version   integer NOT NULL,
    fact_seq       bigint  NOT NULL,
    fact_partition integer NOT NULL,
    fact_offset    bigint  NOT NULL,
    log_partition  integer NOT NULL,
    log_offset     bigint  NOT NULL
);
CREATE INDEX audit_checkpoints_run_size ON audit_checkpoints (run, tree_size);

-- The sink's position in each partition it consumes, written in the same
-- transaction as the rows read before it. first_offset and first_sha256
-- fingerprint the partition's log (the first record the sink read from it),
-- so a schema that meets a different log under the same topic name (a
-- re-created broker) notices and reads that log from its start.
CREATE TABLE consumed_offsets (
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    next_offset  bigint      NOT NULL,
    first_offset bigint,
    first_sha256 bytea,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- Records the sink read but could not store (an undecodable fact, a
-- decision of a type this version does not know). Counted in the offsets
-- all the same: nothing is silently lost, and a later version's rebuild
-- stores them.
CREATE TABLE skipped_records (
    topic     text    NOT NULL,
    partition integer NOT NULL,
    "offset"  bigint  NOT NULL,
    reason    text    NOT NULL,
    PRIMARY KEY (topic, partition, "offset")
);

-- Token prices per run, in US dollars per million tokens, for the cost
-- views. The row with run '*' is the default for runs without their own.
-- Analysts own this table: the sink never writes it, and a rebuild keeps it.
CREATE TABLE prices (
    run                  text PRIMARY KEY,
    prompt_per_mtok      double precision NOT NULL CHECK (prompt_per_mtok >= 0),
    cached_per_mtok      double precision NOT NULL CHECK (cached_per_mtok >= 0),
    completion_per_mtok  double precision NOT NULL CHECK (completion_per_mtok >= 0),
    note                 text NOT NULL DEFAULT ''
);
INSERT INTO prices (run, prompt_per_mtok, cached_per_mtok, completion_per_mtok, note)
VALUES ('*', 0.50, 0.05, 2.00,
        'default: list prices of a mid-size open-weights model served by a third party; replace with your own');

-- +goose Down
DROP TABLE prices, skipped_records, consumed_offsets, audit_checkpoints, audit_findings, batch_drops, batch_turns,
    batch_attempts, batch_groups, batches, admissions, gradient_logprob_gaps, gradient_steps,
    policy_versions, rewards, compactions, tool_calls, turns, attempt_failures, attempt_outcomes,
    attempts, group_closures, groups, task_gates, tasks, runs;
