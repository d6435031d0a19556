package projections

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/events"
)

func TestSamplesSegmentsAndMasks(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	b.group("g1", "t1", 2, events.PurposeTrain)
	b.attempt("a", "g1", "")
	b.tokenTurn("a", 0, 0, nil, []int32{11, 12})         // staleness 0: trains
	b.tokenTurn("a", 1, 0, []int32{21}, []int32{22})     // observation, then completion
	b.compact("a", 1)                                    // segment 0 ends after turn 1
	b.tokenTurn("a", 2, 1, []int32{31, 32}, []int32{33}) // version 1 in batch 1: staleness −1, masked
	b.turnAt("a", 3, 1, 5)                               // no inline tokens: contributes nothing
	b.compact("a", 3)                                    // after the last turn: no further segment
	b.finished("a").reward("a", true, 4, 4)
	b.attempt("b", "g1", "").turnAt("b", 0, 0, 7).finished("b").reward("b", false, 0, 4)
	ds := b.fold()
	var sealed *Decision
	for i := range ds {
		if ds[i].Kind == KindBatchSealed {
			sealed = &ds[i]
		}
	}
	if sealed == nil {
		t.Fatal("no batch sealed")
	}
	// Rewards 1 and 0 (b fails with 0 of 4 tests): grpo advantages 0.5, −0.5.
	// Segment 0 of a: turn 0's completion (mask 1), turn 1's observation
	// (mask 0, log-prob 0) and completion (mask 1). Segment 1: turn 2's
	// observation and its masked completion at version 1; turn 3 adds
	// nothing. b has one segment and no tokens.
	want := strings.Join([]string{
		`{"group":"g1","attempt":"a","segment":0,"token_ids":[11,12,21,22],"loss_mask":[1,1,0,1],"rollout_logprobs":[-0.0625,-0.125,0,-0.0625],"policy_versions":[0,0,0,0],"advantage":0.5}`,
		`{"group":"g1","attempt":"a","segment":1,"token_ids":[31,32,33],"loss_mask":[0,0,0],"rollout_logprobs":[0,0,-0.0625],"policy_versions":[1,1,1],"advantage":0.5}`,
		`{"group":"g1","attempt":"b","segment":0,"token_ids":[],"loss_mask":[],"rollout_logprobs":[],"policy_versions":[],"advantage":-0.5}`,
	}, "\n") + "\n"
	if got := string(sealed.Samples); got != want {
		t.Errorf("samples:\ngot\n%s\nwant\n%s", got, want)
	}
	m, err := ManifestOf(sealed.Value)
	if err != nil {
		t.Fatal(err)
	}
	// a: 2 + 1 + 1 + 5 = 9 completion tokens.
	if got := m.Groups[0].Attempts[0].CompletionTokens; got != 9 {
		t.Errorf("got completion_tokens %d, want 9", got)
	}
	if kinds := findingKinds(t, ds); len(kinds) != 1 || kinds[0] != FindingNegativeStaleness {
		t.Errorf("got findings %v, want one negative_staleness", kinds)
	}
}

// The digest covers the manifest without its digest, then the samples.
func TestDigest(t *testing.T) {
	b := newRun(t).start(openConfig()).task("t1")
	b.group("g1", "t1", 2, events.PurposeTrain)
	b.attempt("a", "g1", "").tokenTurn("a", 0, 0, []int32{1}, []int32{2, 3}).finished("a").reward("a", true, 4, 4)
	b.attempt("b", "g1", "").tokenTurn("b", 0, 0, nil, []int32{4}).finished("b").reward("b", false, 1, 4)
	ds := b.fold()
	m, err := ManifestOf(ds[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	digest := m.Digest
	m.Digest = ""
	body, err := canonicalJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := digest, sha256Hex(append(body, ds[0].Samples...)); got != want {
		t.Errorf("got digest %s, want %s", got, want)
	}
	// The data is the manifest with the digest appended last.
	env := envelopeOf(t, ds[0])
	if !bytes.HasPrefix(env.Data, body[:len(body)-1]) || !bytes.HasSuffix(env.Data, []byte(`,"digest":"`+digest+`"}`)) {
		t.Errorf("data is not the digested manifest followed by its digest: %s", env.Data)
	}
}
