package events_test

import (
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// TestRuleMessages pins the words of every cross-field rule: the rules are
// data that the schema carries to the SDKs, and a template that printed a
// value differently would change what clients are told.
func TestRuleMessages(t *testing.T) {
	for _, tc := range []struct {
		name, body, field, detail string
	}{
		{"group size", record(events.TypeGroupStarted, groupStartedData.set("size", "0")).String(), "data.size", "a group holds at least 1 attempt, got 0"},
		{"cached over prompt", turn(turnData.set("cached_tokens", "901").set("prompt_tokens", "900")), "data.cached_tokens", "901 cached tokens exceed 900 prompt tokens"},
		{"logprobs alone", turn(turnData.del("token_ids")), "data.token_ids", "logprobs given without token_ids"},
		{"token ids alone", turn(turnData.del("logprobs")), "data.logprobs", "token_ids given without logprobs"},
		{"token ids length", turn(turnData.set("token_ids", "[1,2]")), "data.token_ids", "2 token ids for 3 completion tokens"},
		{"logprobs length", turn(turnData.set("logprobs", "[-0.5,-0.25,-0.125,-1]")), "data.logprobs", "4 logprobs for 3 completion tokens"},
		{"v2 no segments", turn2(segments("[]")), "data.version_segments", "no version segments: a turn has at least one"},
		{"v2 first segment", turn2(segments(`[{"start":2,"policy_version":1}]`)), "data.version_segments[0].start", "the first segment starts at token 2, not 0"},
		{"v2 segment order", turn2(segments(`[{"start":0,"policy_version":1},{"start":2,"policy_version":2},{"start":2,"policy_version":3}]`)),
			"data.version_segments[2].start", "starts at token 2, not after the previous segment's start 2"},
		{"v2 segment past the end", turn2(segments(`[{"start":0,"policy_version":1},{"start":7,"policy_version":2}]`)),
			"data.version_segments[1].start", "starts at token 7, past the last of 3 completion tokens"},
		{"v2 versions", turn2(segments(`[{"start":0,"policy_version":4},{"start":1,"policy_version":4}]`)), "data.version_segments[1].policy_version",
			"policy version 4 does not follow the previous segment's 4: versions only move forward, and a version's tokens are one segment"},
		{"v2 token ids length", turn2(turnV2Data.set("token_ids", q(b64i(1, 2, 3, 4)))), "data.token_ids", "4 token ids for 3 completion tokens"},
		{"v2 text cut", turn2(turnV2Bare.set("text_cut", "12")), "data.text", "text_cut 12 given without text"},
		{"v2 input cut", tool2(toolData.set("input_cut", "3")), "data.input", "input_cut 3 given without input"},
		{"v2 output cut", tool2(toolData.set("output", q("x")).set("output_cut", "60000")), "data.output_cut", "60000 bytes cut from an output of 52000 bytes"},
		{"v2 prompt cut", task2(taskRegisteredData.set("prompt_cut", "9")), "data.prompt", "prompt_cut 9 given without prompt"},
		{"compaction", record(events.TypeContextCompacted, compactedData.set("tokens_after", "120001")).String(), "data.tokens_after", "120001 tokens after compaction exceed 120000 before"},
		{"tests", record(events.TypeRewardComputed, rewardData.set("tests_passed", "6").set("tests_total", "5")).String(), "data.tests_passed", "6 tests passed of 5"},
		{"step", gradient(gradientData.set("step", "0")), "data.step", "steps start at 1, got 0"},
		{"batch", gradient(gradientData.set("batch", "0")), "data.batch", "batches start at 1, got 0"},
		{"versions", gradient(gradientData.set("to_version", "2")), "data.to_version", "to_version 2 does not follow from_version 2"},
		{"gap key", gradient(gradientData.set("logprob_gap", `{"0":0.1,"07":0.2,"x\"y":0.3}`)), "data.logprob_gap.07", `key "07" is not a staleness (a non-negative integer)`},
		{"id", envelopeWith("id", q("0192f0c4-7a1e-7c3b-cd2e-4b1f8a6c0d11")), "id", `"0192f0c4-7a1e-7c3b-cd2e-4b1f8a6c0d11" is not a UUID (8-4-4-4-12 hex)`},
		{"run", envelopeWith("run", q("..")), "run", `".." is not a run id ([A-Za-z0-9._-]{1,128}, not . or ..)`},
		{"at", envelopeWith("at", q("2026-02-30T00:00:00Z")), "at", `"2026-02-30T00:00:00Z" is not an RFC 3339 time`},
		{"at in UTC", envelopeWith("at", q("0000-01-01T00:00:00+01:00")), "at", `"0000-01-01T00:00:00+01:00" is outside years 0000-9999 in UTC`},
		{
			"config", runConfig(`{"pass_band":[0.9,0.1,0.2],"group_size":4,"min_group":5,"efficiency_weight":1,"partial_credit_cap":0.5}`), "data.config.pass_band",
			"data.config.pass_band: want [low, high], got 3 numbers; " +
				"data.config.min_group: must be between 1 and group_size 4, got 5; " +
				"data.config.partial_credit_cap: must be in [0, 1 − efficiency_weight/2) = [0, 0.5), got 0.5",
		},
		{
			"config band", runConfig(`{"pass_band":[0.9,0.1],"efficiency_weight":2,"partial_credit_cap":0}`), "data.config.pass_band",
			"data.config.pass_band: want 0 <= low <= high <= 1, got [0.9, 0.1]; " +
				"data.config.efficiency_weight: must be in [0, 2), got 2; " +
				"data.config.partial_credit_cap: must be in [0, 1 − efficiency_weight/2) = [0, 0), got 0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.Decode([]byte(tc.body))
			fe, ok := events.AsFieldError(err)
			if !ok {
				t.Fatalf("got %v, want a *events.FieldError", err)
			}
			if fe.Field != tc.field || fe.Detail != tc.detail {
				t.Errorf("got %s: %q\nwant %s: %q", fe.Field, fe.Detail, tc.field, tc.detail)
			}
		})
	}
}

// TestConfigValidateMessages: Config.Validate, which the projections call
// on effective configurations, words its problems as the decoder does.
func TestConfigValidateMessages(t *testing.T) {
	c := events.DefaultConfig()
	c.MaxStaleness, c.Advantage, c.MinProbes = -1, "ppo", 0
	want := "event 0 field data.config.max_staleness: events: invalid value: must be at least 0, got -1\n" +
		"event 0 field data.config.min_probes: events: invalid value: must be at least 1, got 0\n" +
		`event 0 field data.config.advantage: events: invalid value: must be grpo, grpo_std or rloo, got "ppo"`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
