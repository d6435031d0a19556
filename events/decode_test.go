package events_test

import (
	"encoding/base64"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

// wireCodes pins the stable code of each sentinel: the SDKs and HTTP
// clients branch on these strings.
var wireCodes = map[error]string{
	events.ErrMalformed:      "malformed",
	events.ErrTooLarge:       "too_large",
	events.ErrUnknownType:    "unknown_type",
	events.ErrUnknownVersion: "unknown_version",
	events.ErrUnknownField:   "unknown_field",
	events.ErrDuplicateField: "duplicate_field",
	events.ErrMissingField:   "missing_field",
	events.ErrWrongType:      "wrong_type",
	events.ErrInvalidValue:   "invalid_value",
	events.ErrEmpty:          "empty",
}

// badInput is a request body that must be refused, and how.
type badInput struct {
	name  string
	body  string
	err   error // the sentinel
	index int
	field string
	// detail lists words the error's Detail must contain.
	detail []string
	// large bodies stay out of the shared test vectors.
	large bool
	// ingestOnly marks a rule for new facts alone: Decode reads a record
	// of the log as it was written, by the rules of its day.
	ingestOnly bool
}

// verdict runs a request body through ingest's path: DecodeBatch, then
// EncodeBatch, which applies the bound on the canonical record.
func verdict(body []byte) error {
	evs, err := events.DecodeBatch(body)
	if err != nil {
		return err
	}
	_, err = events.EncodeBatch(evs)
	return err
}

func turn(data obj) string     { return record(events.TypeTurnGenerated, data).String() }
func turn2(data obj) string    { return recordV(events.TypeTurnGenerated, 2, data).String() }
func turn3(data obj) string    { return recordV(events.TypeTurnGenerated, 3, data).String() }
func tool2(data obj) string    { return recordV(events.TypeToolCalled, 2, data).String() }
func task2(data obj) string    { return recordV(events.TypeTaskRegistered, 2, data).String() }
func segments(s string) obj    { return turnV2Data.set("version_segments", s) }
func failed(data obj) string   { return record(events.TypeAttemptFailed, data).String() }
func gradient(data obj) string { return record(events.TypeGradientApplied, data).String() }
func runConfig(config string) string {
	return record(events.TypeRunStarted, runStartedMinimal.set("config", config)).String()
}

// envelopeWith is a valid attempt.failed with one envelope field set to the
// raw JSON v.
func envelopeWith(k, v string) string {
	return record(events.TypeAttemptFailed, failedData).set(k, v).String()
}

func envelopeWithout(k string) string {
	return record(events.TypeAttemptFailed, failedData).del(k).String()
}

func array(bodies ...string) string { return "[" + strings.Join(bodies, ",") + "]" }

// largeTurn is a turn.generated with n token ids and logprobs.
func largeTurn(n int) string {
	var ids, lps strings.Builder
	for i := range n {
		if i > 0 {
			ids.WriteByte(',')
			lps.WriteByte(',')
		}
		ids.WriteString(strconv.Itoa(100000 + i%50000))
		lps.WriteString("-0.123456")
	}
	return turn(turnData.
		set("completion_tokens", strconv.Itoa(n)).
		set("token_ids", "["+ids.String()+"]").
		set("logprobs", "["+lps.String()+"]"))
}

// badInputs lists every kind of bad input the decoder knows, one case each
// (some kinds with a few spellings). The shared test vectors are made from it.
func badInputs() []badInput {
	valid := failed(failedData)
	long := func(n int) string { return strings.Repeat("a", n) }
	return append([]badInput{
		// Not JSON, or no events.
		{name: "malformed/syntax", body: `{"id":"` + testID + `",`, err: events.ErrMalformed},
		{name: "malformed/trailing garbage", body: valid + "}", err: events.ErrMalformed},
		{name: "malformed/two objects", body: valid + valid, err: events.ErrMalformed},
		{name: "malformed/not JSON", body: "id=1&run=r", err: events.ErrMalformed},
		{name: "malformed/unterminated array", body: "[" + valid + ",", err: events.ErrMalformed},
		{name: "malformed/invalid UTF-8", body: strings.Replace(valid, "host", "ho\xffst", 1), err: events.ErrMalformed},
		{name: "malformed/invalid UTF-8 in 3rd event", body: array(valid, valid, strings.Replace(valid, "host", "ho\xc3st", 1)), err: events.ErrMalformed, index: 2},
		{name: "empty/body", body: "", err: events.ErrEmpty},
		{name: "empty/whitespace", body: " \r\n\t", err: events.ErrEmpty},
		{name: "empty/array", body: "[]", err: events.ErrEmpty},
		{name: "empty/spaced array", body: "[ \n ]", err: events.ErrEmpty},

		// Not an event.
		{name: "wrong_type/string body", body: `"attempt.failed"`, err: events.ErrWrongType},
		{name: "wrong_type/null body", body: `null`, err: events.ErrWrongType},
		{name: "wrong_type/number in array", body: array(valid, "1"), err: events.ErrWrongType, index: 1},
		{name: "wrong_type/nested array", body: array("[" + valid + "]"), err: events.ErrWrongType},

		// Catalogue.
		{name: "unknown_type/typo", body: envelopeWith("type", q("attempt.fail")), err: events.ErrUnknownType, field: "type"},
		{name: "unknown_type/decision", body: envelopeWith("type", q("batch.sealed")), err: events.ErrUnknownType, field: "type"},
		{name: "unknown_type/case", body: envelopeWith("type", q("Attempt.Failed")), err: events.ErrUnknownType, field: "type"},
		{name: "unknown_version/2", body: envelopeWith("v", "2"), err: events.ErrUnknownVersion, field: "v"},
		{name: "unknown_version/0", body: envelopeWith("v", "0"), err: events.ErrUnknownVersion, field: "v"},
		{name: "unknown_field/envelope", body: envelopeWith("trace", q("00-ab-cd-01")), err: events.ErrUnknownField, field: "trace"},
		{name: "unknown_field/envelope case", body: envelopeWith("ID", q(testID)), err: events.ErrUnknownField, field: "ID"},
		{name: "unknown_field/data", body: turn(turnData.set("temperature", "0.7")), err: events.ErrUnknownField, field: "data.temperature"},
		{name: "unknown_field/config", body: runConfig(`{"groupsize":8}`), err: events.ErrUnknownField, field: "data.config.groupsize"},
		{name: "unknown_field/gate", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", `[{"name":"a","passed":true},{"name":"b","passed":true,"note":"x"}]`)).String(), err: events.ErrUnknownField, field: "data.gates[1].note"},

		// Missing fields.
		{name: "missing_field/id", body: envelopeWithout("id"), err: events.ErrMissingField, field: "id"},
		{name: "missing_field/run", body: envelopeWithout("run"), err: events.ErrMissingField, field: "run"},
		{name: "missing_field/type", body: envelopeWithout("type"), err: events.ErrMissingField, field: "type"},
		{name: "missing_field/v", body: envelopeWithout("v"), err: events.ErrMissingField, field: "v"},
		{name: "missing_field/at", body: envelopeWithout("at"), err: events.ErrMissingField, field: "at"},
		{name: "missing_field/source", body: envelopeWithout("source"), err: events.ErrMissingField, field: "source"},
		{name: "missing_field/data", body: envelopeWithout("data"), err: events.ErrMissingField, field: "data"},
		{name: "missing_field/data field", body: turn(turnData.del("finish")), err: events.ErrMissingField, field: "data.finish"},
		{name: "missing_field/config", body: record(events.TypeRunStarted, runStartedMinimal.del("config")).String(), err: events.ErrMissingField, field: "data.config"},
		{name: "missing_field/gate field", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", `[{"name":"builds"}]`)).String(), err: events.ErrMissingField, field: "data.gates[0].passed"},

		// null, wherever it is.
		{name: "null/data field", body: failed(failedData.set("reason", "null")), err: events.ErrWrongType, field: "data.reason"},
		{name: "null/envelope field", body: envelopeWith("source", "null"), err: events.ErrWrongType, field: "source"},
		{name: "null/data", body: envelopeWith("data", "null"), err: events.ErrWrongType, field: "data"},
		{name: "null/optional field", body: record(events.TypeRunStarted, runStartedMinimal.set("notes", "null")).String(), err: events.ErrWrongType, field: "data.notes"},
		{name: "null/config field", body: runConfig(`{"group_size":null}`), err: events.ErrWrongType, field: "data.config.group_size"},
		{name: "null/array element", body: turn(turnData.set("token_ids", "[11,null,13]")), err: events.ErrWrongType, field: "data.token_ids[1]"},
		{name: "null/map value", body: gradient(gradientData.set("logprob_gap", `{"1":0.065,"4":null}`)), err: events.ErrWrongType, field: "data.logprob_gap.4"},
		{name: "null/gate", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", `[null]`)).String(), err: events.ErrWrongType, field: "data.gates[0]"},

		// Wrong JSON types.
		{name: "wrong_type/string for int", body: turn(turnData.set("turn", `"0"`)), err: events.ErrWrongType, field: "data.turn"},
		{name: "wrong_type/number for string", body: turn(turnData.set("attempt", "7")), err: events.ErrWrongType, field: "data.attempt"},
		{name: "wrong_type/object for array", body: turn(turnData.set("token_ids", "{}")), err: events.ErrWrongType, field: "data.token_ids"},
		{name: "wrong_type/float for int", body: turn(turnData.set("turn", "1.5")), err: events.ErrWrongType, field: "data.turn"},
		{name: "wrong_type/exponent for int", body: turn(turnData.set("prompt_tokens", "1e2")), err: events.ErrWrongType, field: "data.prompt_tokens"},
		{name: "wrong_type/int32 overflow", body: turn(turnData.set("token_ids", "[11,2147483648,13]")), err: events.ErrWrongType, field: "data.token_ids", detail: []string{"2147483648"}},
		{name: "wrong_type/string in array", body: turn(turnData.set("token_ids", `[11,"12",13]`)), err: events.ErrWrongType, field: "data.token_ids", detail: []string{"holding a string"}},
		{name: "wrong_type/int64 overflow", body: turn(turnData.set("latency_ms", "9223372036854775808")), err: events.ErrWrongType, field: "data.latency_ms"},
		{name: "wrong_type/float overflow", body: gradient(gradientData.set("loss", "1e999")), err: events.ErrWrongType, field: "data.loss", detail: []string{"1e999", "out of range"}},
		{name: "wrong_type/float32 overflow in logprobs", body: turn(turnData.set("logprobs", "[-0.5,-1e400,0]")), err: events.ErrWrongType, field: "data.logprobs", detail: []string{"-1e400", "element 1", "out of range"}},
		{name: "wrong_type/float32 overflow, positive", body: turn(turnData.set("logprobs", "[1e39,-0.25,0]")), err: events.ErrWrongType, field: "data.logprobs", detail: []string{"1e39", "element 0", "out of range"}},
		{name: "wrong_type/float overflow in a map", body: gradient(gradientData.set("logprob_gap", `{"1":0.065,"4":1e999}`)), err: events.ErrWrongType, field: "data.logprob_gap", detail: []string{"1e999", "out of range"}},
		{name: "wrong_type/string for bool", body: record(events.TypeRewardComputed, rewardData.set("passed", `"true"`)).String(), err: events.ErrWrongType, field: "data.passed"},
		{name: "wrong_type/string for version", body: envelopeWith("v", `"1"`), err: events.ErrWrongType, field: "v"},
		{name: "wrong_type/number for id", body: envelopeWith("id", "7"), err: events.ErrWrongType, field: "id"},
		{name: "wrong_type/array for data", body: envelopeWith("data", "[]"), err: events.ErrWrongType, field: "data"},
		{name: "wrong_type/array for config", body: runConfig("[]"), err: events.ErrWrongType, field: "data.config"},
		{name: "wrong_type/object for gates", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", "{}")).String(), err: events.ErrWrongType, field: "data.gates"},
		{name: "wrong_type/array for map", body: gradient(gradientData.set("logprob_gap", "[0.065]")), err: events.ErrWrongType, field: "data.logprob_gap"},

		// Ids.
		{name: "id/not a UUID", body: envelopeWith("id", q("not-a-uuid")), err: events.ErrInvalidValue, field: "id"},
		{name: "id/no dashes", body: envelopeWith("id", q(strings.ReplaceAll(testID, "-", ""))), err: events.ErrInvalidValue, field: "id"},
		{name: "id/braces", body: envelopeWith("id", q("{"+testID+"}")), err: events.ErrInvalidValue, field: "id"},
		{name: "id/urn", body: envelopeWith("id", q("urn:uuid:"+testID)), err: events.ErrInvalidValue, field: "id"},
		{name: "id/not hex", body: envelopeWith("id", q("0192f0c4-7a1e-7c3b-9d2e-4b1f8a6c0d1g")), err: events.ErrInvalidValue, field: "id"},
		{name: "id/nil UUID", body: envelopeWith("id", q("00000000-0000-0000-0000-000000000000")), err: events.ErrInvalidValue, field: "id"},
		{name: "id/empty", body: envelopeWith("id", q("")), err: events.ErrInvalidValue, field: "id"},
		{name: "run/too long", body: envelopeWith("run", q(long(129))), err: events.ErrInvalidValue, field: "run"},
		{name: "run/path", body: envelopeWith("run", q("../x")), err: events.ErrInvalidValue, field: "run"},
		{name: "run/dot dot", body: envelopeWith("run", q("..")), err: events.ErrInvalidValue, field: "run"},
		{name: "run/dot", body: envelopeWith("run", q(".")), err: events.ErrInvalidValue, field: "run"},
		{name: "run/space", body: envelopeWith("run", q("flash 300b")), err: events.ErrInvalidValue, field: "run"},
		{name: "run/colon", body: envelopeWith("run", q("flash:300b")), err: events.ErrInvalidValue, field: "run"},
		{name: "run/empty", body: envelopeWith("run", q("")), err: events.ErrInvalidValue, field: "run"},
		{name: "entity/too long", body: failed(failedData.set("attempt", q(long(201)))), err: events.ErrInvalidValue, field: "data.attempt"},
		{name: "entity/space", body: failed(failedData.set("attempt", q("a 1"))), err: events.ErrInvalidValue, field: "data.attempt"},
		{name: "entity/unicode", body: record(events.TypeGroupStarted, groupStartedData.set("task", q("tâche-3"))).String(), err: events.ErrInvalidValue, field: "data.task"},
		{name: "entity/empty", body: failed(failedData.set("attempt", q(""))), err: events.ErrInvalidValue, field: "data.attempt"},
		{name: "entity/empty retry_of", body: record(events.TypeAttemptStarted, attemptStartedData.set("retry_of", q(""))).String(), err: events.ErrInvalidValue, field: "data.retry_of"},
		{name: "entity/source", body: envelopeWith("source", q("engine 17")), err: events.ErrInvalidValue, field: "source"},
		{name: "entity/dot", body: failed(failedData.set("attempt", q("."))), err: events.ErrInvalidValue, field: "data.attempt", detail: []string{"path segment"}, ingestOnly: true},
		{name: "entity/dot dot", body: record(events.TypeGroupStarted, groupStartedData.set("group", q(".."))).String(), err: events.ErrInvalidValue, field: "data.group", ingestOnly: true},
		{name: "entity/dot dot segment", body: record(events.TypeAttemptStarted, attemptStartedData.set("vm", q("vm/../host-4"))).String(), err: events.ErrInvalidValue, field: "data.vm", ingestOnly: true},
		{name: "entity/dot segment", body: record(events.TypeAttemptStarted, attemptStartedData.set("engine", q("engine/./17"))).String(), err: events.ErrInvalidValue, field: "data.engine", ingestOnly: true},
		{name: "entity/leading dot dot", body: record(events.TypeGroupStarted, groupStartedData.set("task", q("../t-3"))).String(), err: events.ErrInvalidValue, field: "data.task", ingestOnly: true},
		{name: "entity/leading dot", body: record(events.TypeGroupStarted, groupStartedData.set("task", q("./t-3"))).String(), err: events.ErrInvalidValue, field: "data.task", ingestOnly: true},
		{name: "entity/trailing dot dot", body: envelopeWith("source", q("engine-17/..")), err: events.ErrInvalidValue, field: "source", ingestOnly: true},
		{name: "entity/trailing dot", body: record(events.TypeAttemptStarted, attemptStartedData.set("retry_of", q("a-0/."))).String(), err: events.ErrInvalidValue, field: "data.retry_of", ingestOnly: true},
		{name: "entity/dot dot in 2nd event", body: array(failed(failedData), failed(failedData.set("attempt", q("a/../../b")))), err: events.ErrInvalidValue, index: 1, field: "data.attempt", ingestOnly: true},

		// An escape of half a UTF-16 surrogate pair: JSON parsers turn it
		// into U+FFFD, which is not what was sent.
		{name: "surrogate/lone high", body: failed(failedData.set("reason", `"host \ud800 lost"`)), err: events.ErrInvalidValue, field: "data.reason", detail: []string{`\ud800`, "surrogate"}, ingestOnly: true},
		{name: "surrogate/lone low", body: failed(failedData.set("reason", `"\uDC00"`)), err: events.ErrInvalidValue, field: "data.reason", detail: []string{`\uDC00`}, ingestOnly: true},
		{name: "surrogate/high then not low", body: failed(failedData.set("reason", `"\ud83d\u0041"`)), err: events.ErrInvalidValue, field: "data.reason", detail: []string{`\ud83d`}, ingestOnly: true},
		{name: "surrogate/high then high", body: failed(failedData.set("reason", `"\ud83d\ud83d\ude00"`)), err: events.ErrInvalidValue, field: "data.reason", ingestOnly: true},
		{name: "surrogate/high at the end", body: failed(failedData.set("reason", `"lost\ud800"`)), err: events.ErrInvalidValue, field: "data.reason", ingestOnly: true},
		{name: "surrogate/low after an escaped backslash", body: failed(failedData.set("reason", `"\\\udc00"`)), err: events.ErrInvalidValue, field: "data.reason", ingestOnly: true},
		{name: "surrogate/in an id", body: failed(failedData.set("attempt", `"a\ud800"`)), err: events.ErrInvalidValue, field: "data.attempt", ingestOnly: true},
		{name: "surrogate/in the envelope", body: envelopeWith("source", `"engine-\udfff"`), err: events.ErrInvalidValue, field: "source", ingestOnly: true},
		{name: "surrogate/in a nested object", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", `[{"name":"b\ud800","passed":true}]`)).String(), err: events.ErrInvalidValue, field: "data.gates[0].name", ingestOnly: true},
		{name: "surrogate/in a map key", body: gradient(gradientData.set("logprob_gap", `{"1":0.065,"\ud800":0.08}`)), err: events.ErrInvalidValue, field: "data.logprob_gap", ingestOnly: true},
		{name: "surrogate/in an enum", body: record(events.TypeGroupStarted, groupStartedData.set("purpose", `"tr\udbffain"`)).String(), err: events.ErrInvalidValue, field: "data.purpose", ingestOnly: true},
		{name: "surrogate/in 2nd event", body: array(failed(failedData), failed(failedData.set("reason", `"\ud800"`))), err: events.ErrInvalidValue, index: 1, field: "data.reason", ingestOnly: true},

		// Time.
		{name: "at/words", body: envelopeWith("at", q("yesterday")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/space", body: envelopeWith("at", q("2026-11-29 19:10:00Z")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/no zone", body: envelopeWith("at", q("2026-11-29T19:10:00")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/unix", body: envelopeWith("at", "1795633800"), err: events.ErrWrongType, field: "at"},
		{name: "at/one-digit hour", body: envelopeWith("at", q("2026-11-29T9:10:00Z")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/comma fraction", body: envelopeWith("at", q("2026-11-29T19:10:00,5Z")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/offset hour 24", body: envelopeWith("at", q("2026-11-29T19:10:00+24:00")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/offset minute 60", body: envelopeWith("at", q("2026-11-29T19:10:00+01:60")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/ten-digit fraction", body: envelopeWith("at", q("2026-11-29T19:10:00.1234567890Z")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/empty", body: envelopeWith("at", q("")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/before year 0 in UTC", body: envelopeWith("at", q("0000-01-01T00:00:00+01:00")), err: events.ErrInvalidValue, field: "at"},
		{name: "at/after year 9999 in UTC", body: envelopeWith("at", q("9999-12-31T23:30:00-01:00")), err: events.ErrInvalidValue, field: "at"},

		// Enums.
		{name: "enum/finish", body: turn(turnData.set("finish", q("done"))), err: events.ErrInvalidValue, field: "data.finish"},
		{name: "enum/finish case", body: turn(turnData.set("finish", q("Stop"))), err: events.ErrInvalidValue, field: "data.finish"},
		{name: "enum/outcome", body: record(events.TypeAttemptFinished, finishedData.set("outcome", q("gave_up"))).String(), err: events.ErrInvalidValue, field: "data.outcome"},
		{name: "enum/purpose", body: record(events.TypeGroupStarted, groupStartedData.set("purpose", q("warmup"))).String(), err: events.ErrInvalidValue, field: "data.purpose"},
		{name: "enum/kind", body: record(events.TypeTaskRegistered, taskRegisteredData.set("kind", q("math"))).String(), err: events.ErrInvalidValue, field: "data.kind"},
		{name: "enum/advantage", body: runConfig(`{"advantage":"ppo"}`), err: events.ErrInvalidValue, field: "data.config.advantage"},

		// Numbers.
		{name: "negative/count", body: turn(turnData.set("prompt_tokens", "-1")), err: events.ErrInvalidValue, field: "data.prompt_tokens"},
		{name: "negative/token id", body: turn(turnData.set("token_ids", "[11,-12,13]")), err: events.ErrInvalidValue, field: "data.token_ids[1]"},
		{name: "negative/fork_ms", body: record(events.TypeAttemptStarted, attemptStartedData.set("fork_ms", "-5")).String(), err: events.ErrInvalidValue, field: "data.fork_ms"},
		{name: "negative/size", body: record(events.TypeGroupStarted, groupStartedData.set("size", "-1")).String(), err: events.ErrInvalidValue, field: "data.size"},
		{name: "zero/size", body: record(events.TypeGroupStarted, groupStartedData.set("size", "0")).String(), err: events.ErrInvalidValue, field: "data.size"},
		{name: "negative/tests_total", body: record(events.TypeRewardComputed, rewardData.set("tests_total", "-1")).String(), err: events.ErrInvalidValue, field: "data.tests_total"},
		{name: "negative/version", body: envelopeWith("v", "-1"), err: events.ErrInvalidValue, field: "v"},
		{name: "negative/gap", body: gradient(gradientData.set("logprob_gap", `{"1":-0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap.1"},
		{name: "negative/config", body: runConfig(`{"max_staleness":-1}`), err: events.ErrInvalidValue, field: "data.config.max_staleness"},
		{name: "max/logprob above 0", body: turn(turnData.set("logprobs", "[-0.5,0.25,0]")), err: events.ErrInvalidValue, field: "data.logprobs[1]"},
		{name: "max/truncated_fraction above 1", body: gradient(gradientData.set("truncated_fraction", "1.5")), err: events.ErrInvalidValue, field: "data.truncated_fraction"},

		// Rules across fields.
		{name: "turn/token_ids length", body: turn(turnData.set("token_ids", "[11,12]")), err: events.ErrInvalidValue, field: "data.token_ids"},
		{name: "turn/empty token_ids", body: turn(turnData.set("token_ids", "[]").set("logprobs", "[]")), err: events.ErrInvalidValue, field: "data.token_ids"},
		{name: "turn/logprobs length", body: turn(turnData.set("logprobs", "[-0.5,-0.25,0,-1]")), err: events.ErrInvalidValue, field: "data.logprobs"},
		{name: "turn/token_ids without logprobs", body: turn(turnData.del("logprobs")), err: events.ErrMissingField, field: "data.logprobs"},
		{name: "turn/logprobs without token_ids", body: turn(turnData.del("token_ids")), err: events.ErrMissingField, field: "data.token_ids"},
		{name: "turn/cached over prompt", body: turn(turnData.set("cached_tokens", "101")), err: events.ErrInvalidValue, field: "data.cached_tokens"},
		{name: "reward/tests_passed over tests_total", body: record(events.TypeRewardComputed, rewardData.set("tests_passed", "6")).String(), err: events.ErrInvalidValue, field: "data.tests_passed"},
		{name: "compacted/tokens_after over tokens_before", body: record(events.TypeContextCompacted, compactedData.set("tokens_after", "120001")).String(), err: events.ErrInvalidValue, field: "data.tokens_after"},
		{name: "gradient/step 0", body: gradient(gradientData.set("step", "0")), err: events.ErrInvalidValue, field: "data.step"},
		{name: "gradient/batch 0", body: gradient(gradientData.set("batch", "0")), err: events.ErrInvalidValue, field: "data.batch"},
		{name: "gradient/to_version equal", body: gradient(gradientData.set("to_version", "2")), err: events.ErrInvalidValue, field: "data.to_version"},
		{name: "gradient/to_version below", body: gradient(gradientData.set("to_version", "1")), err: events.ErrInvalidValue, field: "data.to_version"},
		{name: "gradient/gap key 01", body: gradient(gradientData.set("logprob_gap", `{"01":0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap.01"},
		{name: "gradient/gap key -1", body: gradient(gradientData.set("logprob_gap", `{"-1":0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap.-1"},
		{name: "gradient/gap key x", body: gradient(gradientData.set("logprob_gap", `{"x":0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap.x"},
		{name: "gradient/gap key too big", body: gradient(gradientData.set("logprob_gap", `{"1000000":0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap.1000000"},
		{name: "gradient/gap key empty", body: gradient(gradientData.set("logprob_gap", `{"":0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap"},
		// Of several bad keys, always the first in byte order.
		{name: "gradient/gap keys", body: gradient(gradientData.set("logprob_gap", `{"z":1,"y":1,"x":1,"w":1,"v":1,"u":1,"t":1,"s":1,"r":1}`)), err: events.ErrInvalidValue, field: "data.logprob_gap.r"},

		// Strings.
		{name: "nul/data", body: failed(failedData.set("reason", `"lost\u0000host"`)), err: events.ErrInvalidValue, field: "data.reason"},
		{name: "nul/gate name", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", `[{"name":"\u0000","passed":true}]`)).String(), err: events.ErrInvalidValue, field: "data.gates[0].name"},
		{name: "nul/run", body: envelopeWith("run", `"r\u0000"`), err: events.ErrInvalidValue, field: "run"},
		{name: "nul/map key", body: gradient(gradientData.set("logprob_gap", `{"1\u0000":0.065}`)), err: events.ErrInvalidValue, field: "data.logprob_gap"},
		{name: "empty string", body: failed(failedData.set("reason", `""`)), err: events.ErrInvalidValue, field: "data.reason"},
		{name: "text/over MaxTextBytes", body: failed(failedData.set("reason", q(long(events.MaxTextBytes+1)))), err: events.ErrInvalidValue, field: "data.reason"},

		// Position in the request.
		{name: "index/3rd event", body: array(valid, turn(turnData), turn(turnData.del("finish"))), err: events.ErrMissingField, index: 2, field: "data.finish"},
		{name: "index/last of many", body: array(valid, valid, valid, valid, envelopeWith("v", "2")), err: events.ErrUnknownVersion, index: 4, field: "v"},

		// Size.
		{name: "too_large/canonical over MaxRecordBytes", body: array(valid, valid, largeTurn(70000)), err: events.ErrTooLarge, index: 2, large: true},
		{name: "too_large/raw record", body: array(valid, strings.Replace(valid, "{", "{"+strings.Repeat(" ", 2*events.MaxRecordBytes), 1)), err: events.ErrTooLarge, index: 1, large: true},

		// Run configuration (docs/design.md §4).
		{
			name: "config/many problems", body: runConfig(`{"group_size":0,"batch_groups":0,"pass_band":[0.9,0.1],"min_probes":0,"partial_credit_cap":0.99}`),
			err: events.ErrInvalidValue, field: "data.config.group_size",
			detail: []string{"group_size", "batch_groups", "min_group", "pass_band", "min_probes", "partial_credit_cap"},
		},
		{name: "config/partial_credit_cap at the limit", body: runConfig(`{"efficiency_weight":0.5,"partial_credit_cap":0.75}`), err: events.ErrInvalidValue, field: "data.config.partial_credit_cap"},
		{name: "config/partial_credit_cap at the default limit", body: runConfig(`{"partial_credit_cap":0.95}`), err: events.ErrInvalidValue, field: "data.config.partial_credit_cap"},
		{name: "config/partial_credit_cap above 1", body: runConfig(`{"partial_credit_cap":1.5}`), err: events.ErrInvalidValue, field: "data.config.partial_credit_cap"},
		{name: "config/pass_band of 3", body: runConfig(`{"pass_band":[0.1,0.5,0.9]}`), err: events.ErrInvalidValue, field: "data.config.pass_band"},
		{name: "config/pass_band of 1", body: runConfig(`{"pass_band":[0.5]}`), err: events.ErrInvalidValue, field: "data.config.pass_band"},
		{name: "config/pass_band empty", body: runConfig(`{"pass_band":[]}`), err: events.ErrInvalidValue, field: "data.config.pass_band"},
		{name: "config/pass_band reversed", body: runConfig(`{"pass_band":[0.85,0.15]}`), err: events.ErrInvalidValue, field: "data.config.pass_band"},
		{name: "config/pass_band above 1", body: runConfig(`{"pass_band":[0.15,1.5]}`), err: events.ErrInvalidValue, field: "data.config.pass_band[1]"},
		{name: "config/min_group over group_size", body: runConfig(`{"group_size":4,"min_group":5}`), err: events.ErrInvalidValue, field: "data.config.min_group"},
		{name: "config/efficiency_weight 2", body: runConfig(`{"efficiency_weight":2,"partial_credit_cap":0}`), err: events.ErrInvalidValue, field: "data.config.efficiency_weight"},

		// bytes.TrimSpace's white space that JSON's is not, around data in
		// an envelope of the canonical layout.
		{name: "malformed/form feed before the data", body: strings.Replace(failed(failedData), `"data":`, "\"data\":\f", 1), err: events.ErrMalformed},
		{name: "malformed/vertical tab after the data", body: strings.TrimSuffix(failed(failedData), "}") + "\v}", err: events.ErrMalformed},

		// Nesting: refused as a whole before any parser recurses into it.
		{name: "malformed/nested deeper than MaxDepth", body: array(valid, nested("[", "]", events.MaxDepth)), err: events.ErrMalformed, detail: []string{"nest deeper than"}},
		{name: "malformed/objects nested deeper than MaxDepth", body: failed(failedData.set("reason", nested(`{"a":`, "}", events.MaxDepth-1))), err: events.ErrMalformed},
		{name: "wrong_type/nested MaxDepth deep", body: array(valid, nested("[", "]", events.MaxDepth-1)), err: events.ErrWrongType, index: 1},
		{name: "wrong_type/brackets in strings do not nest", body: failed(failedData.set("reason", strings.Replace(nested(`{"a":`, "}", 10), "1", q(strings.Repeat("[{", events.MaxDepth)), 1))), err: events.ErrWrongType, field: "data.reason"},
		// Keys given twice, which JSON parsers resolve differently.
		{name: "duplicate_field/envelope run", body: append(record(events.TypeAttemptFailed, failedData), kv{"run", q("other-run")}).String(), err: events.ErrDuplicateField, field: "run"},
		{name: "duplicate_field/same value", body: append(record(events.TypeAttemptFailed, failedData), kv{"v", "1"}).String(), err: events.ErrDuplicateField, field: "v"},
		{name: "duplicate_field/data", body: failed(append(failedData, kv{"reason", q("x")})), err: events.ErrDuplicateField, field: "data.reason"},
		{name: "duplicate_field/escaped key", body: strings.Replace(failed(append(failedData, kv{"KEY", q("x")})), `"KEY"`, `"re\u0061son"`, 1), err: events.ErrDuplicateField, field: "data.reason"},
		{name: "duplicate_field/before unknown fields", body: failed(append(failedData, kv{"aaa", "1"}, kv{"attempt", q("a-2")})), err: events.ErrDuplicateField, field: "data.attempt"},
		{name: "duplicate_field/first in document order", body: failed(append(failedData, kv{"reason", q("x")}, kv{"attempt", q("a-2")})), err: events.ErrDuplicateField, field: "data.reason"},
		{name: "duplicate_field/gate", body: record(events.TypeTaskRegistered, taskRegisteredData.set("gates", `[{"name":"a","passed":true,"passed":false}]`)).String(), err: events.ErrDuplicateField, field: "data.gates[0].passed"},
		{name: "duplicate_field/config", body: runConfig(`{"group_size":8,"group_size":4}`), err: events.ErrDuplicateField, field: "data.config.group_size"},
		{name: "duplicate_field/map key", body: gradient(gradientData.set("logprob_gap", `{"1":0.065,"1":null}`)), err: events.ErrDuplicateField, field: "data.logprob_gap.1"},
		{name: "duplicate_field/in the 2nd event", body: array(valid, failed(append(failedData, kv{"attempt", q("a-1")}))), err: events.ErrDuplicateField, index: 1, field: "data.attempt"},
	}, append(badV2Inputs(), badV3Inputs()...)...)
}

// badV3Inputs are the refusals of turn.generated and tool.called version 3
// and of vocabulary.registered (docs/design.md §18.9, §18.10): each rule
// names its field.
func badV3Inputs() []badInput {
	samp := func(s string) obj { return turnV3Data.set("sampling", s) }
	voc := func(d obj) string { return record(events.TypeVocabularyRegistered, d).String() }
	return []badInput{
		// What version 2 cannot hold.
		{name: "v3/v2 has no parent", body: turn2(turnV2Bare.set("parent", "0").set("prefix_tokens", "1")), err: events.ErrUnknownField, field: "data.parent"},
		{name: "v3/v2 has no known", body: turn2(turnV2Bare.set("version_segments", `[{"start":0,"policy_version":2,"known":"engine"}]`)), err: events.ErrUnknownField, field: "data.version_segments[0].known"},
		{name: "v3/v2 has no abort", body: turn2(turnV2Bare.set("finish", q("abort"))), err: events.ErrInvalidValue, field: "data.finish"},
		{name: "v3/v2 tool has no call_id", body: recordV(events.TypeToolCalled, 2, toolV2Data.set("call_id", q("c"))).String(), err: events.ErrUnknownField, field: "data.call_id"},

		// Parent and prefix.
		{name: "v3/parent not before the turn", body: turn3(turnV3Data.set("parent", "2")), err: events.ErrInvalidValue, field: "data.parent"},
		{name: "v3/parent negative", body: turn3(turnV3Data.set("parent", "-1")), err: events.ErrInvalidValue, field: "data.parent"},
		{name: "v3/parent without prefix_tokens", body: turn3(turnV3Data.del("prefix_tokens")), err: events.ErrMissingField, field: "data.prefix_tokens"},
		{name: "v3/parent 0 without prefix_tokens", body: turn3(turnV3Data.set("parent", "0").del("prefix_tokens")), err: events.ErrMissingField, field: "data.prefix_tokens"},
		{name: "v3/prefix_tokens without parent", body: turn3(turnV3Data.del("parent")), err: events.ErrMissingField, field: "data.parent"},
		{name: "v3/prefix_tokens over prompt_tokens", body: turn3(turnV3Data.set("prefix_tokens", "101")), err: events.ErrInvalidValue, field: "data.prefix_tokens"},
		{name: "v3/observation not the new prompt tokens", body: turn3(turnV3Data.set("prefix_tokens", "96")), err: events.ErrInvalidValue, field: "data.observation_token_ids"},
		{name: "v3/first turn observation not the whole prompt", body: turn3(turnV3First.set("prompt_tokens", "5")), err: events.ErrInvalidValue, field: "data.observation_token_ids"},
		{name: "v3/diverged not before the turn", body: turn3(turnV3Data.set("diverged", `{"turn":2,"at":0}`)), err: events.ErrInvalidValue, field: "data.diverged.turn"},
		{name: "v3/diverged unknown member", body: turn3(turnV3Data.set("diverged", `{"turn":1,"at":0,"why":"x"}`)), err: events.ErrUnknownField, field: "data.diverged.why"},
		{name: "v3/diverged missing at", body: turn3(turnV3Data.set("diverged", `{"turn":1}`)), err: events.ErrMissingField, field: "data.diverged.at"},
		{name: "v3/diverged null", body: turn3(turnV3Data.set("diverged", `null`)), err: events.ErrWrongType, field: "data.diverged"},

		// Enums, tags, sampling, engine.
		{name: "v3/prompt_ids_from", body: turn3(turnV3Data.set("prompt_ids_from", q("guess"))), err: events.ErrInvalidValue, field: "data.prompt_ids_from"},
		{name: "v3/ids_from", body: turn3(turnV3Data.set("ids_from", q("text"))), err: events.ErrInvalidValue, field: "data.ids_from"},
		{name: "v3/known", body: turn3(turnV3Data.set("version_segments", `[{"start":0,"policy_version":1,"known":"guessed"}]`)), err: events.ErrInvalidValue, field: "data.version_segments[0].known"},
		{name: "v3/unknown tag", body: turn3(turnV3Data.set("tags", `["client_cut","sad"]`)), err: events.ErrInvalidValue, field: "data.tags[1]"},
		{name: "v3/tags unsorted", body: turn3(turnV3Data.set("tags", `["refused","client_cut"]`)), err: events.ErrInvalidValue, field: "data.tags[1]"},
		{name: "v3/tags repeated", body: turn3(turnV3Data.set("tags", `["refused","refused"]`)), err: events.ErrInvalidValue, field: "data.tags[1]"},
		{name: "v3/sampling unknown member", body: turn3(samp(`{"temperature":1,"beam":2}`)), err: events.ErrUnknownField, field: "data.sampling.beam"},
		{name: "v3/sampling negative temperature", body: turn3(samp(`{"temperature":-1}`)), err: events.ErrInvalidValue, field: "data.sampling.temperature"},
		{name: "v3/sampling top_p over 1", body: turn3(samp(`{"top_p":1.5}`)), err: events.ErrInvalidValue, field: "data.sampling.top_p"},
		{name: "v3/sampling top_k negative", body: turn3(samp(`{"top_k":-1}`)), err: events.ErrInvalidValue, field: "data.sampling.top_k"},
		{name: "v3/sampling seed fraction", body: turn3(samp(`{"seed":1.5}`)), err: events.ErrWrongType, field: "data.sampling.seed"},
		{name: "v3/sampling null member", body: turn3(samp(`{"temperature":null}`)), err: events.ErrWrongType, field: "data.sampling.temperature"},
		{name: "v3/sampling logprobs_mode too long", body: turn3(samp(`{"logprobs_mode":"` + strings.Repeat("x", 65) + `"}`)), err: events.ErrInvalidValue, field: "data.sampling.logprobs_mode"},
		{name: "v3/engine name not an id", body: turn3(turnV3Data.set("engine", `{"name":"v llm"}`)), err: events.ErrInvalidValue, field: "data.engine.name"},
		{name: "v3/engine without name", body: turn3(turnV3Data.set("engine", `{"version":"1"}`)), err: events.ErrMissingField, field: "data.engine.name"},
		{name: "v3/tool call_id too long", body: recordV(events.TypeToolCalled, 3, toolV3Data.set("call_id", q(strings.Repeat("c", 201)))).String(), err: events.ErrInvalidValue, field: "data.call_id"},

		// Vocabulary.
		{name: "v3/vocabulary chunk past chunks", body: voc(vocabularyData.set("chunk", "40")), err: events.ErrInvalidValue, field: "data.chunk"},
		{name: "v3/vocabulary no chunks", body: voc(vocabularyData.set("chunks", "0")), err: events.ErrInvalidValue, field: "data.chunks"},
		{name: "v3/vocabulary first past size", body: voc(vocabularyData.set("first", "151936")), err: events.ErrInvalidValue, field: "data.first"},
		{name: "v3/vocabulary offsets overrun size", body: voc(vocabularyData.set("first", "151933")), err: events.ErrInvalidValue, field: "data.offsets"},
		{name: "v3/vocabulary pieces without offsets", body: voc(vocabularyData.del("offsets")), err: events.ErrMissingField, field: "data.offsets"},
		{name: "v3/vocabulary pieces not base64", body: voc(vocabularyData.set("pieces", q("aGVsbG8"))), err: events.ErrInvalidValue, field: "data.pieces"},
		{name: "v3/vocabulary pieces a number", body: voc(vocabularyData.set("pieces", "5")), err: events.ErrWrongType, field: "data.pieces"},
	}
}

// badV2Inputs are the refusals of catalogue version 2 (docs/design.md §18).
func badV2Inputs() []badInput {
	valid := failed(failedData)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	return []badInput{
		// The versions of each type.
		{name: "v2/unknown_version 4", body: recordV(events.TypeTurnGenerated, 4, turnV2Data).String(), err: events.ErrUnknownVersion, field: "v"},
		{name: "v2/v1 field policy_version", body: turn2(turnV2Data.set("policy_version", "1")), err: events.ErrUnknownField, field: "data.policy_version"},
		{name: "v2/v1 has no version_segments", body: turn(turnData.set("version_segments", `[{"start":0,"policy_version":1}]`)), err: events.ErrUnknownField, field: "data.version_segments"},
		{name: "v2/v1 has no text", body: turn(turnData.set("text", q("hi"))), err: events.ErrUnknownField, field: "data.text"},
		{name: "v2/v1 token_ids in base64", body: turn(turnData.set("token_ids", q(b64i(11, 12, 13)))), err: events.ErrWrongType, field: "data.token_ids"},
		{name: "v2/v1 tool has no input", body: record(events.TypeToolCalled, toolData.set("input", q("ls"))).String(), err: events.ErrUnknownField, field: "data.input"},
		{name: "v2/v1 task has no prompt", body: record(events.TypeTaskRegistered, taskRegisteredData.set("prompt", q("p"))).String(), err: events.ErrUnknownField, field: "data.prompt"},

		// Version segments.
		{name: "v2/segments missing", body: turn2(turnV2Data.del("version_segments")), err: events.ErrMissingField, field: "data.version_segments"},
		{name: "v2/segments empty", body: turn2(segments(`[]`)), err: events.ErrInvalidValue, field: "data.version_segments", detail: []string{"no version segments"}},
		{name: "v2/segments not an array", body: turn2(segments(`{"start":0,"policy_version":1}`)), err: events.ErrWrongType, field: "data.version_segments"},
		{name: "v2/segment null", body: turn2(segments(`[null]`)), err: events.ErrWrongType, field: "data.version_segments[0]"},
		{name: "v2/segment a number", body: turn2(segments(`[0]`)), err: events.ErrWrongType, field: "data.version_segments[0]"},
		{name: "v2/segment without start", body: turn2(segments(`[{"start":0,"policy_version":1},{"policy_version":2}]`)), err: events.ErrMissingField, field: "data.version_segments[1].start"},
		{name: "v2/segment unknown member", body: turn2(segments(`[{"start":0,"policy_version":1,"tokens":2}]`)), err: events.ErrUnknownField, field: "data.version_segments[0].tokens"},
		{name: "v2/segment member twice", body: turn2(segments(`[{"start":0,"start":0,"policy_version":1}]`)), err: events.ErrDuplicateField, field: "data.version_segments[0].start"},
		{name: "v2/segment negative start", body: turn2(segments(`[{"start":0,"policy_version":1},{"start":-1,"policy_version":2}]`)), err: events.ErrInvalidValue, field: "data.version_segments[1].start"},
		{name: "v2/segment negative version", body: turn2(segments(`[{"start":0,"policy_version":-1}]`)), err: events.ErrInvalidValue, field: "data.version_segments[0].policy_version"},
		{name: "v2/segment fractional start", body: turn2(segments(`[{"start":0.5,"policy_version":1}]`)), err: events.ErrWrongType, field: "data.version_segments[0].start"},
		{name: "v2/first segment not at 0", body: turn2(segments(`[{"start":1,"policy_version":1},{"start":2,"policy_version":2}]`)), err: events.ErrInvalidValue, field: "data.version_segments[0].start", detail: []string{"not 0"}},
		{name: "v2/segments out of order", body: turn2(segments(`[{"start":0,"policy_version":1},{"start":2,"policy_version":2},{"start":1,"policy_version":3}]`)), err: events.ErrInvalidValue, field: "data.version_segments[2].start"},
		{name: "v2/segments at one token", body: turn2(segments(`[{"start":0,"policy_version":1},{"start":0,"policy_version":2}]`)), err: events.ErrInvalidValue, field: "data.version_segments[1].start"},
		{name: "v2/segment past the completion", body: turn2(segments(`[{"start":0,"policy_version":1},{"start":3,"policy_version":2}]`)), err: events.ErrInvalidValue, field: "data.version_segments[1].start", detail: []string{"3 completion tokens"}},
		{name: "v2/two segments of no tokens", body: turn2(turnV2Bare.set("completion_tokens", "0").set("version_segments", `[{"start":0,"policy_version":1},{"start":1,"policy_version":2}]`)), err: events.ErrInvalidValue, field: "data.version_segments[1].start"},
		{name: "v2/versions going back", body: turn2(segments(`[{"start":0,"policy_version":2},{"start":2,"policy_version":1}]`)), err: events.ErrInvalidValue, field: "data.version_segments[1].policy_version"},
		{name: "v2/one version in two segments", body: turn2(segments(`[{"start":0,"policy_version":1},{"start":2,"policy_version":1}]`)), err: events.ErrInvalidValue, field: "data.version_segments[1].policy_version"},

		// Binary token arrays.
		{name: "v2/token_ids as an array", body: turn2(turnV2Data.set("token_ids", "[11,12,13]")), err: events.ErrWrongType, field: "data.token_ids", detail: []string{"base64"}},
		{name: "v2/token_ids a number", body: turn2(turnV2Data.set("token_ids", "11")), err: events.ErrWrongType, field: "data.token_ids"},
		{name: "v2/token_ids null", body: turn2(turnV2Data.set("token_ids", "null")), err: events.ErrWrongType, field: "data.token_ids"},
		{name: "v2/not base64", body: turn2(turnV2Data.set("token_ids", q("CwAAAAwA!AAADQAAAA=="))), err: events.ErrInvalidValue, field: "data.token_ids", detail: []string{"not base64"}},
		{name: "v2/base64url alphabet", body: turn2(turnV2Data.set("token_ids", q("CwAA-AwAAAAN_AAA"))), err: events.ErrInvalidValue, field: "data.token_ids", detail: []string{"not base64"}},
		{name: "v2/base64 without padding", body: turn2(turnV2Data.set("observation_token_ids", q(strings.TrimRight(b64i(7, 8), "=")))), err: events.ErrInvalidValue, field: "data.observation_token_ids", detail: []string{"not base64"}},
		{name: "v2/base64 padding inside", body: turn2(turnV2Data.set("observation_token_ids", q("BwAAAA==CAAAAA=="))), err: events.ErrInvalidValue, field: "data.observation_token_ids", detail: []string{"not base64"}},
		{name: "v2/base64 non-zero padding bits", body: turn2(turnV2Data.set("observation_token_ids", q("BwAAAAgAAAB="))), err: events.ErrInvalidValue, field: "data.observation_token_ids", detail: []string{"not canonical"}},
		{name: "v2/base64 line break", body: turn2(turnV2Data.set("token_ids", `"CwAAAAwA\nAAANAAAA"`)), err: events.ErrInvalidValue, field: "data.token_ids", detail: []string{"not base64"}},
		{name: "v2/base64 space", body: turn2(turnV2Data.set("token_ids", q("CwAAAAwA AAANAAAA"))), err: events.ErrInvalidValue, field: "data.token_ids", detail: []string{"not base64"}},
		{name: "v2/not whole int32 values", body: turn2(turnV2Data.set("token_ids", q(base64.StdEncoding.EncodeToString(make([]byte, 13))))), err: events.ErrInvalidValue, field: "data.token_ids", detail: []string{"13 bytes is not a whole number of int32 values"}},
		{name: "v2/not whole float32 values", body: turn2(turnV2Data.set("logprobs", q(base64.StdEncoding.EncodeToString(make([]byte, 6))))), err: events.ErrInvalidValue, field: "data.logprobs", detail: []string{"6 bytes is not a whole number of float32 values"}},
		{name: "v2/negative token id", body: turn2(turnV2Data.set("token_ids", q(b64i(11, -12, 13)))), err: events.ErrInvalidValue, field: "data.token_ids[1]", detail: []string{"negative"}},
		{name: "v2/negative token id among many", body: turn2(turnV2Data.set("token_ids", q(b64i(1, 2, 3, 4, 5, 6, 7, 8, 9, -10, 11, 12, 13)))), err: events.ErrInvalidValue, field: "data.token_ids[9]", detail: []string{"negative"}},
		{name: "v2/negative observation id", body: turn2(turnV2Data.set("observation_token_ids", q(b64i(7, 8, -2147483648)))), err: events.ErrInvalidValue, field: "data.observation_token_ids[2]"},
		{name: "v2/logprob NaN", body: turn2(turnV2Data.set("logprobs", q(b64f(-0.5, nan, 0)))), err: events.ErrInvalidValue, field: "data.logprobs[1]", detail: []string{"NaN"}},
		{name: "v2/logprob +Inf", body: turn2(turnV2Data.set("logprobs", q(b64f(-0.5, -0.25, inf)))), err: events.ErrInvalidValue, field: "data.logprobs[2]", detail: []string{"+Inf"}},
		{name: "v2/logprob -Inf", body: turn2(turnV2Data.set("logprobs", q(b64f(-inf, -0.25, 0)))), err: events.ErrInvalidValue, field: "data.logprobs[0]", detail: []string{"-Inf"}},
		{name: "v2/logprob above 0", body: turn2(turnV2Data.set("logprobs", q(b64f(-0.5, 0.5, 0)))), err: events.ErrInvalidValue, field: "data.logprobs[1]", detail: []string{"at most 0, got 0.5"}},
		{name: "v2/token_ids length", body: turn2(turnV2Data.set("token_ids", q(b64i(11, 12, 13, 14)))), err: events.ErrInvalidValue, field: "data.token_ids", detail: []string{"4 token ids for 3 completion tokens"}},
		{name: "v2/logprobs length", body: turn2(turnV2Data.set("logprobs", q(b64f(-0.5, -0.25)))), err: events.ErrInvalidValue, field: "data.logprobs", detail: []string{"2 logprobs for 3 completion tokens"}},
		{name: "v2/token_ids without logprobs", body: turn2(turnV2Data.del("logprobs")), err: events.ErrMissingField, field: "data.logprobs"},
		{name: "v2/logprobs with empty token_ids", body: turn2(turnV2Data.set("token_ids", q(""))), err: events.ErrMissingField, field: "data.token_ids"},
		{name: "v2/segments before arrays", body: turn2(segments(`[]`).set("token_ids", q(b64i(1)))), err: events.ErrInvalidValue, field: "data.version_segments"},

		// Text.
		{name: "v2/text_cut without text", body: turn2(turnV2Bare.set("text_cut", "10")), err: events.ErrMissingField, field: "data.text", detail: []string{"text_cut 10"}},
		{name: "v2/text_cut with empty text", body: turn2(turnV2Bare.set("text", q("")).set("text_cut", "10")), err: events.ErrMissingField, field: "data.text"},
		{name: "v2/text_cut negative", body: turn2(turnV2Data.set("text_cut", "-1")), err: events.ErrInvalidValue, field: "data.text_cut"},
		{name: "v2/text a number", body: turn2(turnV2Data.set("text", "12")), err: events.ErrWrongType, field: "data.text"},
		{name: "v2/text with NUL", body: turn2(turnV2Data.set("text", `"a\u0000b"`)), err: events.ErrInvalidValue, field: "data.text"},
		{name: "v2/text over MaxTextBytes", body: turn2(turnV2Data.set("text", q(strings.Repeat("é", events.MaxTextBytes/2+1)))), err: events.ErrInvalidValue, field: "data.text", detail: []string{"bytes, more than"}},
		{name: "v2/tool input_cut without input", body: tool2(toolData.set("input_cut", "5")), err: events.ErrMissingField, field: "data.input"},
		{name: "v2/tool output_cut without output", body: tool2(toolData.set("output_cut", "5")), err: events.ErrMissingField, field: "data.output"},
		{name: "v2/tool output_cut over output_bytes", body: tool2(toolData.set("output", q("x")).set("output_cut", "52001")), err: events.ErrInvalidValue, field: "data.output_cut", detail: []string{"52001 bytes cut from an output of 52000 bytes"}},
		{name: "v2/tool output with NUL", body: tool2(toolData.set("output", `"\u0000"`)), err: events.ErrInvalidValue, field: "data.output"},
		{name: "v2/task prompt_cut without prompt", body: task2(taskRegisteredData.set("prompt_cut", "7")), err: events.ErrMissingField, field: "data.prompt"},
		{name: "v2/task prompt wrong type", body: task2(taskRegisteredData.set("prompt", "[]")), err: events.ErrWrongType, field: "data.prompt"},

		// Position and size.
		{name: "v2/index of the 2nd event", body: array(valid, turn2(turnV2Data.set("token_ids", q("@")))), err: events.ErrInvalidValue, index: 1, field: "data.token_ids"},
		{name: "v2/too_large canonical", body: array(valid, largeTurnV2(300000)), err: events.ErrTooLarge, index: 1, large: true},
	}
}

// largeTurnV2 is a version 2 turn.generated with n token ids and
// logprobs.
func largeTurnV2(n int) string {
	ids, lps := make([]int32, n), make([]float32, n)
	for i := range n {
		ids[i], lps[i] = int32(100000+i%50000), -0.123456
	}
	return turn2(turnV2Bare.set("completion_tokens", strconv.Itoa(n)).set("token_ids", q(b64i(ids...))).set("logprobs", q(b64f(lps...))))
}

// nested is n levels of open around a 1, closed by close.
func nested(open, close string, n int) string {
	return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
}

func TestDecodeRefuses(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range badInputs() {
		if names[tc.name] {
			t.Errorf("two cases named %q", tc.name)
		}
		names[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			err := verdict([]byte(tc.body))
			if err == nil {
				t.Fatalf("got no error, want %v", tc.err)
			}
			checkFieldError(t, err, tc)

			// Decode agrees on a single event.
			if !strings.HasPrefix(strings.TrimSpace(tc.body), "{") || tc.err == events.ErrTooLarge {
				return
			}
			_, derr := events.Decode([]byte(tc.body))
			if tc.ingestOnly {
				return // TestDecodeReadsTheLogAsWritten
			}
			if derr == nil {
				t.Fatalf("Decode: got no error, want %v", tc.err)
			}
			checkFieldError(t, derr, tc)
		})
	}
}

func checkFieldError(t *testing.T, err error, tc badInput) {
	t.Helper()
	fe, ok := events.AsFieldError(err)
	if !ok {
		t.Fatalf("got %T %v, want a *events.FieldError", err, err)
	}
	if got, want := fe.Code(), wireCodes[tc.err]; got != want {
		t.Errorf("got code %q, want %q (%v)", got, want, err)
	}
	if !errors.Is(err, tc.err) {
		t.Errorf("got %v, want it to wrap %v", err, tc.err)
	}
	if fe.Index != tc.index {
		t.Errorf("got index %d, want %d (%v)", fe.Index, tc.index, err)
	}
	if fe.Field != tc.field {
		t.Errorf("got field %q, want %q (%v)", fe.Field, tc.field, err)
	}
	if fe.Detail == "" {
		t.Errorf("got no detail, want an explanation (%v)", err)
	}
	for _, w := range tc.detail {
		if !strings.Contains(fe.Detail, w) {
			t.Errorf("got detail %q, want it to mention %s", fe.Detail, w)
		}
	}
	msg := fe.Error()
	if !strings.Contains(msg, "event "+strconv.Itoa(tc.index)) || (tc.field != "" && !strings.Contains(msg, tc.field)) {
		t.Errorf("got message %q, want it to name event %d and field %q", msg, tc.index, tc.field)
	}
}

// Ingest's newer rules hold new facts only: a record already in the log
// with an id of "." segments, or a lone surrogate escape, decodes as it
// did when it was written, so a replay of an old log decides what the
// projector decided then.
func TestDecodeReadsTheLogAsWritten(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		check      func(events.Event) bool
	}{
		{"dot dot segment", failed(failedData.set("attempt", q("a/../b"))), func(ev events.Event) bool {
			return ev.Data.(*events.AttemptFailed).Attempt == "a/../b"
		}},
		{"lone surrogate", failed(failedData.set("reason", `"host \ud800 lost"`)), func(ev events.Event) bool {
			return ev.Data.(*events.AttemptFailed).Reason == "host \uFFFD lost"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := verdict([]byte(tc.body)); err == nil {
				t.Fatal("ingest: got no error, want the body refused")
			}
			ev, err := events.Decode([]byte(tc.body))
			if err != nil {
				t.Fatalf("Decode: got %v, want the record read", err)
			}
			if !tc.check(ev) {
				t.Errorf("Decode: got %+v", ev.Data)
			}
		})
	}
}

// TestDecodeAccepts holds the valid side of each boundary that badInputs
// probes.
func TestDecodeAccepts(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	belowDefault := math.Nextafter(1-0.1/2, 0)
	for _, tc := range []struct {
		name string
		body string
	}{
		{"run of 128", envelopeWith("run", q(long(128)))},
		{"run with dots", envelopeWith("run", q("...x._-"))},
		{"entity of 200", failed(failedData.set("attempt", q(long(200))))},
		{"entity punctuation", failed(failedData.set("attempt", q("host-4:/a.b_c")))},
		{"entity dots beside other characters", failed(failedData.set("attempt", q(".a/b./..c/c../.../a..b")))},
		{"entity of empty segments", failed(failedData.set("attempt", q("/a//b/")))},
		{"surrogate pair", failed(failedData.set("reason", `"\ud83d\ude00 \uD83D\uDE00"`))},
		{"escaped backslash before u", failed(failedData.set("reason", `"\\ud800"`))},
		{"escape beside a surrogate", failed(failedData.set("reason", `"\n\ud83d\ude00\u00e9\uffff"`))},
		{"text of MaxTextBytes", failed(failedData.set("reason", q(long(events.MaxTextBytes))))},
		{"unicode text", failed(failedData.set("reason", q("host «4» 断开")))},
		{"year 0000", envelopeWith("at", q("0000-01-01T00:00:00Z"))},
		{"year 9999", envelopeWith("at", q("9999-12-31T23:59:59.999999999Z"))},
		{"offset", envelopeWith("at", q("2026-11-29T20:10:00+01:00"))},
		{"offset -23:59", envelopeWith("at", q("2026-11-29T20:10:00-23:59"))},
		{"tool named in words", record(events.TypeToolCalled, toolData.set("tool", q("web search (v2)"))).String()},
		{"zero counts", turn(turnBare.set("prompt_tokens", "0").set("completion_tokens", "0").set("cached_tokens", "0").set("latency_ms", "0"))},
		{"cached equals prompt", turn(turnData.set("cached_tokens", "100"))},
		{"logprob 0", turn(turnData.set("logprobs", "[0,0,0]"))},
		{"token id int32 max", turn(turnData.set("token_ids", "[0,1,2147483647]"))},
		{"tests all passed", record(events.TypeRewardComputed, rewardData.set("passed", "true").set("tests_passed", "5")).String()},
		{"no tests", record(events.TypeRewardComputed, rewardData.set("tests_passed", "0").set("tests_total", "0")).String()},
		{"compaction saves nothing", record(events.TypeContextCompacted, compactedData.set("tokens_after", "120000")).String()},
		{"one version step", gradient(gradientData.set("from_version", "0").set("to_version", "1").set("step", "1").set("batch", "1"))},
		{"gap keys", gradient(gradientData.set("logprob_gap", `{"0":0,"10":0.1,"999999":0.2}`))},
		{"empty gap", gradient(gradientData.set("logprob_gap", `{}`))},
		{"truncated_fraction 1", gradient(gradientData.set("truncated_fraction", "1"))},
		{"array of one", array(failed(failedData))},
		{"partial_credit_cap below the limit", runConfig(`{"efficiency_weight":0.5,"partial_credit_cap":0.7499999999999999}`)},
		{"partial_credit_cap below the default limit", runConfig(`{"partial_credit_cap":` + strconv.FormatFloat(belowDefault, 'g', -1, 64) + `}`)},
		{"efficiency_weight 0", runConfig(`{"efficiency_weight":0,"partial_credit_cap":0.99}`)},
		{"pass_band point", runConfig(`{"pass_band":[0.5,0.5]}`)},
		{"pass_band whole", runConfig(`{"pass_band":[0,1]}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := verdict([]byte(tc.body)); err != nil {
				t.Errorf("got %v, want no error", err)
			}
		})
	}
}

// TestConfigEfficiencyWeightZero: an explicit zero is a choice, not a gap.
func TestConfigEfficiencyWeightZero(t *testing.T) {
	ev := mustDecode(t, runConfig(`{"efficiency_weight":0}`))
	cfg := ev.Data.(*events.RunStarted).Config.Resolve()
	if cfg.EfficiencyWeight != 0 {
		t.Errorf("got efficiency_weight %g, want 0", cfg.EfficiencyWeight)
	}
	if want := events.DefaultConfig().EfficiencyWeight; want != 0.1 {
		t.Errorf("got default efficiency_weight %g, want 0.1", want)
	}
	ev = mustDecode(t, runConfig(`{}`))
	if got := ev.Data.(*events.RunStarted).Config.Resolve().EfficiencyWeight; got != 0.1 {
		t.Errorf("got efficiency_weight %g when absent, want 0.1", got)
	}
}

// TestConfigValidateJoins: RunConfig.Validate reports each problem as its own
// *FieldError.
func TestConfigValidateJoins(t *testing.T) {
	zero, capped, band := 0, 0.99, []float64{0.9, 0.1, 0.5}
	rc := events.RunConfig{GroupSize: &zero, BatchGroups: &zero, PartialCreditCap: &capped, PassBand: band}
	err := rc.Validate()
	if err == nil {
		t.Fatal("got no error, want several")
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("got %T, want an errors.Join", err)
	}
	var fields []string
	var walk func([]error)
	walk = func(errs []error) {
		for _, e := range errs {
			if j, ok := e.(interface{ Unwrap() []error }); ok {
				walk(j.Unwrap())
				continue
			}
			fe, ok := events.AsFieldError(e)
			if !ok {
				t.Errorf("got %T %v, want a *events.FieldError", e, e)
				continue
			}
			if !errors.Is(fe, events.ErrInvalidValue) {
				t.Errorf("got %v, want it to wrap ErrInvalidValue", fe)
			}
			fields = append(fields, fe.Field)
		}
	}
	walk(joined.Unwrap())
	want := []string{"data.config.pass_band", "data.config.group_size", "data.config.batch_groups", "data.config.min_group", "data.config.partial_credit_cap"}
	if strings.Join(fields, " ") != strings.Join(want, " ") {
		t.Errorf("got fields %v, want %v", fields, want)
	}
}

// A Decoder decides what Decode decides, record after record: the same
// event (token arrays included, while they are valid) or the same
// refusal, whatever it decoded before.
func TestDecoderAsDecode(t *testing.T) {
	var bodies []string
	golden, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil || len(golden) == 0 {
		t.Fatalf("golden records: %v (%d)", err, len(golden))
	}
	for _, path := range golden {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}
	// Large token turns between small ones: a record's values land where
	// the last one's were.
	for _, n := range []int{2000, 3, 70000, 1} {
		bodies = append(bodies, largeTurnV2(n), turn(turnData))
	}
	refused := 0
	for _, tc := range badInputs() {
		if strings.HasPrefix(strings.TrimSpace(tc.body), "{") {
			bodies = append(bodies, tc.body)
			refused++
		}
	}
	var dec events.Decoder
	for i, body := range bodies {
		want, werr := events.Decode([]byte(body))
		got, gerr := dec.Decode([]byte(body))
		switch {
		case (werr == nil) != (gerr == nil):
			t.Fatalf("record %d: Decode: %v; Decoder: %v", i, werr, gerr)
		case werr != nil:
			if werr.Error() != gerr.Error() {
				t.Fatalf("record %d: Decode: %v; Decoder: %v", i, werr, gerr)
			}
		case !reflect.DeepEqual(got, want):
			t.Fatalf("record %d: Decode: %+v; Decoder: %+v", i, want.Data, got.Data)
		}
	}
	if refused < 50 {
		t.Fatalf("only %d refusals compared", refused)
	}
}
