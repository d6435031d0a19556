-- Catalogue v3 (docs/design.md §18.9, §18.10): what a recording proxy adds
-- to turns and tool calls, and engines' vocabularies.
--
-- As for v2, the read model keeps counts and facts about the token
-- sequences, not the ids: a v3 turn's whole-sequence prompt is described by
-- its parent turn, the prompt tokens it shares with it (prefix_tokens) and
-- where the sequence diverged from the previous turn's; the ids stay in the
-- facts log. Every new column is NULL (or false, or an empty array) for a
-- version 1 or 2 fact, which has none of them.
--
-- segment_known[i] says how segment_versions[i] was known (engine,
-- observed, bracketed); NULL is a declared version. refused is the
-- `refused` tag, kept as a column because the projections read it (§6.9).
--
-- vocabulary_chunks holds each vocabulary.registered fact: pieces are the
-- tokens' bytes concatenated, offsets[k] (1-based in SQL) the end of token
-- first_token + k - 1 within them.

-- +goose Up
ALTER TABLE turns
    ADD COLUMN parent                 bigint,
    ADD COLUMN prefix_tokens          bigint,
    ADD COLUMN diverged_turn          bigint,
    ADD COLUMN diverged_at            bigint,
    ADD COLUMN prompt_ids_from        text,
    ADD COLUMN ids_from               text,
    ADD COLUMN temperature            double precision,
    ADD COLUMN top_p                  double precision,
    ADD COLUMN top_k                  bigint,
    ADD COLUMN min_p                  double precision,
    ADD COLUMN max_tokens             bigint,
    ADD COLUMN seed                   bigint,
    ADD COLUMN presence_penalty       double precision,
    ADD COLUMN frequency_penalty      double precision,
    ADD COLUMN repetition_penalty     double precision,
    ADD COLUMN logprobs_mode          text,
    ADD COLUMN engine_name            text,
    ADD COLUMN engine_version         text,
    ADD COLUMN tags                   text[]  NOT NULL DEFAULT '{}',
    ADD COLUMN refused                boolean NOT NULL DEFAULT false,
    ADD COLUMN segment_known          text[];

ALTER TABLE tool_calls
    ADD COLUMN call_id      text,
    ADD COLUMN unanswered   boolean NOT NULL DEFAULT false,
    ADD COLUMN exit_unknown boolean NOT NULL DEFAULT false;

-- vocabulary.registered
CREATE TABLE vocabulary_chunks (
    event_id      uuid PRIMARY KEY,
    run           text        NOT NULL,
    producer      text        NOT NULL,
    at            timestamptz NOT NULL,
    log_partition integer     NOT NULL,
    log_offset    bigint      NOT NULL,
    engine        text        NOT NULL,
    model         text        NOT NULL,
    size          bigint      NOT NULL,
    chunk         integer     NOT NULL,
    chunks        integer     NOT NULL,
    first_token   integer     NOT NULL,
    tokens        integer     NOT NULL, -- how many tokens the chunk holds
    pieces        bytea,
    offsets       integer[]
);
CREATE INDEX vocabulary_chunks_run_engine ON vocabulary_chunks (run, engine, model, chunk);

-- +goose Down
DROP TABLE vocabulary_chunks;
ALTER TABLE tool_calls DROP COLUMN exit_unknown, DROP COLUMN unanswered, DROP COLUMN call_id;
ALTER TABLE turns
    DROP COLUMN segment_known, DROP COLUMN refused, DROP COLUMN tags, DROP COLUMN engine_version,
    DROP COLUMN engine_name, DROP COLUMN logprobs_mode, DROP COLUMN repetition_penalty,
    DROP COLUMN frequency_penalty, DROP COLUMN presence_penalty, DROP COLUMN seed, DROP COLUMN max_tokens,
    DROP COLUMN min_p, DROP COLUMN top_k, DROP COLUMN top_p, DROP COLUMN temperature, DROP COLUMN ids_from,
    DROP COLUMN prompt_ids_from, DROP COLUMN diverged_at, DROP COLUMN diverged_turn, DROP COLUMN prefix_tokens,
    DROP COLUMN parent;
