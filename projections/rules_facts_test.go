package projections

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/rolloutledger/rolloutledger/events"
)

// The fact lines of the rule transcripts (testdata/rules/README.md): each
// line becomes the events it stands for, built by the test run builder, so
// a transcript's facts are the ones the other tests of the package fold.

func describeFact(p pendingRecord) string {
	if p.raw != nil {
		return "raw record"
	}
	switch d := p.ev.Data.(type) {
	case *events.GroupStarted:
		return string(p.ev.Type) + " " + d.Group
	case *events.AttemptStarted:
		return string(p.ev.Type) + " " + d.Attempt
	case *events.TurnGenerated:
		return fmt.Sprintf("%s %s %d", p.ev.Type, d.Attempt, d.Turn)
	case *events.AttemptFinished:
		return string(p.ev.Type) + " " + d.Attempt
	case *events.RewardComputed:
		return string(p.ev.Type) + " " + d.Attempt
	case *events.PolicyPublished:
		return fmt.Sprintf("%s %d", p.ev.Type, d.Version)
	}
	return string(p.ev.Type)
}

// factArgs reads the arguments of a fact line: positional words, then
// key=value and key=(v1,v2) arguments. Every argument must be used.
type factArgs struct {
	cmd  string
	pos  []string
	kv   map[string][]string
	used map[string]bool
	errs []error
}

func parseFactArgs(line string) (*factArgs, error) {
	cmd, args, err := datadriven.ParseLine(line)
	if err != nil {
		return nil, err
	}
	a := &factArgs{cmd: cmd, kv: map[string][]string{}, used: map[string]bool{}}
	for _, arg := range args {
		if arg.Vals == nil {
			a.pos = append(a.pos, arg.Key)
			continue
		}
		if _, dup := a.kv[arg.Key]; dup {
			return nil, fmt.Errorf("%s= given twice", arg.Key)
		}
		a.kv[arg.Key] = arg.Vals
	}
	return a, nil
}

func (a *factArgs) fail(format string, args ...any) {
	a.errs = append(a.errs, fmt.Errorf(format, args...))
}

// positional returns the i-th positional word, which is required and named.
func (a *factArgs) positional(i int, name string) string {
	if i >= len(a.pos) {
		a.fail("%s needs %s", a.cmd, name)
		return ""
	}
	return a.pos[i]
}

// flag reports whether the positional keyword word was given (after the
// first n positional words).
func (a *factArgs) flag(n int, word string) bool {
	if len(a.pos) > n && a.pos[n] == word {
		a.pos = slices.Delete(a.pos, n, n+1)
		return true
	}
	return false
}

func (a *factArgs) str(key, def string) string {
	v, ok := a.kv[key]
	if !ok {
		return def
	}
	a.used[key] = true
	if len(v) != 1 {
		a.fail("%s= takes one value, got %d", key, len(v))
		return def
	}
	return v[0]
}

func (a *factArgs) need(key string) string {
	if _, ok := a.kv[key]; !ok {
		a.fail("%s needs %s=", a.cmd, key)
		return ""
	}
	return a.str(key, "")
}

func (a *factArgs) has(key string) bool { _, ok := a.kv[key]; return ok }

func (a *factArgs) int(key string, def int64) int64 {
	s := a.str(key, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		a.fail("%s=%s: want an integer", key, s)
	}
	return n
}

// atoi reads an integer word; an empty one was reported missing already.
func atoi(a *factArgs, what, s string) int64 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		a.fail("%s %q: want an integer", what, s)
	}
	return n
}

// ints reads key=(1,2,3); key=() is empty.
func (a *factArgs) ints(key string, def []int64) []int64 {
	v, ok := a.kv[key]
	if !ok {
		return def
	}
	a.used[key] = true
	out := []int64{}
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, atoi(a, key, s))
		}
	}
	return out
}

func (a *factArgs) int32s(key string) []int32 {
	var out []int32
	for _, n := range a.ints(key, nil) {
		out = append(out, int32(n))
	}
	return out
}

// segments reads the v= of one turn: a policy version V, or the version
// segments V@START,V@START,... (in parentheses or not), e.g. v=3@0,4@812.
func (a *factArgs) segments() []events.VersionSegment {
	v, ok := a.kv["v"]
	if !ok {
		a.fail("%s needs v= (the policy version, or V@START,... segments)", a.cmd)
		return nil
	}
	a.used["v"] = true
	return a.parseSegments(strings.Join(v, ","))
}

// segmentLists reads the v=(T0,T1,...) of several turns, each a version V
// or (V@START,V@START,...).
func (a *factArgs) segmentLists() [][]events.VersionSegment {
	v, ok := a.kv["v"]
	if !ok {
		return nil
	}
	a.used["v"] = true
	out := [][]events.VersionSegment{}
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, a.parseSegments(s))
		}
	}
	return out
}

func (a *factArgs) parseSegments(s string) []events.VersionSegment {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "("), ")")
	if !strings.Contains(s, "@") {
		return events.SingleVersion(atoi(a, "v=", strings.TrimSpace(s)))
	}
	var out []events.VersionSegment
	for _, part := range strings.Split(s, ",") {
		v, start, ok := strings.Cut(strings.TrimSpace(part), "@")
		if !ok {
			a.fail("v=%s: segment %q: want VERSION@START", s, part)
			continue
		}
		out = append(out, events.VersionSegment{Start: atoi(a, "segment start", start), PolicyVersion: atoi(a, "segment version", v)})
	}
	return out
}

// tests reads tests=P/T.
func (a *factArgs) tests() (passed, total int) {
	s := a.str("tests", "0/0")
	p, t, ok := strings.Cut(s, "/")
	if !ok {
		a.fail("tests=%s: want passed/total, e.g. tests=3/10", s)
		return 0, 0
	}
	return int(atoi(a, "tests passed", p)), int(atoi(a, "tests total", t))
}

// done reports unused arguments and every problem met.
func (a *factArgs) done(positionals int) error {
	if len(a.pos) > positionals {
		a.fail("unexpected %q", strings.Join(a.pos[positionals:], " "))
	}
	for _, k := range slices.Sorted(maps.Keys(a.kv)) {
		if !a.used[k] {
			a.fail("%s takes no %s=", a.cmd, k)
		}
	}
	return errors.Join(a.errs...)
}

// parse turns a fact line into the records it stands for.
func (tr *transcript) parse(line string) ([]pendingRecord, error) {
	if raw, ok := strings.CutPrefix(line, "raw "); ok {
		return []pendingRecord{{raw: []byte(strings.TrimSpace(raw))}}, nil
	}
	a, err := parseFactArgs(line)
	if err != nil {
		return nil, err
	}
	b := tr.b
	from := len(b.evs)
	label := a.str("id", "")
	var positionals int
	switch a.cmd {
	case "start":
		positionals = 0
		rc := events.RunConfig{}
		intp := func(key string) *int {
			if !a.has(key) {
				return nil
			}
			return ptr(int(a.int(key, 0)))
		}
		floatp := func(key string) *float64 {
			if !a.has(key) {
				return nil
			}
			s := a.str(key, "")
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				a.fail("%s=%s: want a number", key, s)
			}
			return &f
		}
		rc.GroupSize, rc.BatchGroups, rc.MinGroup = intp("group_size"), intp("batch_groups"), intp("min_group")
		rc.MaxStaleness, rc.MinProbes = intp("max_staleness"), intp("min_probes")
		rc.PartialCreditCap, rc.EfficiencyWeight = floatp("partial_credit_cap"), floatp("efficiency_weight")
		if a.has("enforce_admission") {
			s := a.str("enforce_admission", "")
			v, err := strconv.ParseBool(s)
			if err != nil {
				a.fail("enforce_admission=%s: want true or false", s)
			}
			rc.EnforceAdmission = &v
		}
		if a.has("advantage") {
			rc.Advantage = ptr(a.str("advantage", ""))
		}
		if v, ok := a.kv["pass_band"]; ok {
			a.used["pass_band"] = true
			for _, s := range v {
				f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
				if err != nil {
					a.fail("pass_band=(%s): want two numbers", strings.Join(v, ","))
				}
				rc.PassBand = append(rc.PassBand, f)
			}
		}
		tr.withLabel(label, func() { b.start(rc) })
	case "task":
		positionals = 1
		id := a.positional(0, "a task id")
		tr.withLabel(label, func() { b.task(id) })
	case "group":
		positionals = 1
		id, task, size, purpose := a.positional(0, "a group id"), a.need("task"), a.int("size", 0), a.need("purpose")
		if !a.has("size") {
			a.fail("group needs size=")
		}
		tr.withLabel(label, func() { b.group(id, task, int(size), purpose) })
	case "attempt":
		positionals = 1
		id, group := a.positional(0, "an attempt id"), a.need("group")
		task, retryOf := tr.taskOf(a, group), a.str("retry_of", "")
		tr.withLabel(label, func() { b.attemptOf(id, group, task, retryOf) })
	case "turn":
		positionals = 2
		id, n := a.positional(0, "an attempt id"), atoi(a, "turn index", a.positional(1, "a turn index"))
		segs := a.segments()
		v3 := a.flag(2, "v3")
		if v3 || a.has("parent") || a.has("temp") || a.has("tags") {
			// A version 3 turn: obs= are its new prompt tokens (all of them
			// without a parent).
			obs, out := a.int32s("obs"), a.int32s("out")
			var parent *int
			if a.has("parent") {
				parent = ptr(int(a.int("parent", 0)))
			}
			prefix := a.int("prefix", 0)
			var temp *float64
			if s := a.str("temp", ""); s != "" {
				f, err := strconv.ParseFloat(s, 64)
				if err != nil {
					a.fail("temp=%s: want a number", s)
				}
				temp = &f
			}
			var tags []string
			if v, ok := a.kv["tags"]; ok {
				a.used["tags"] = true
				tags = v
			}
			tr.withLabel(label, func() { b.v3TokenTurn(id, int(n), segs, parent, prefix, obs, out, temp, tags...) })
		} else if a.has("obs") || a.has("out") {
			obs, out := a.int32s("obs"), a.int32s("out")
			if a.has("tokens") && a.int("tokens", 0) != int64(len(out)) {
				a.fail("tokens= must be the number of out= tokens")
			}
			tr.withLabel(label, func() { b.segmentedTokenTurn(id, int(n), segs, obs, out) })
		} else {
			tokens := a.int("tokens", 10)
			tr.withLabel(label, func() { b.segmentedTurn(id, int(n), segs, tokens) })
		}
	case "turns":
		positionals = 1
		id, vs, tokens := a.positional(0, "an attempt id"), a.segmentLists(), a.int("tokens", 10)
		if vs == nil {
			a.fail("turns needs v=(versions of turns 0, 1, ...)")
		}
		for n, segs := range vs {
			b.segmentedTurn(id, n, segs, tokens)
		}
	case "compact":
		positionals = 2
		id, n := a.positional(0, "an attempt id"), atoi(a, "turn index", a.positional(1, "the turn it follows"))
		tr.withLabel(label, func() { b.compact(id, int(n)) })
	case "finish":
		positionals = 1
		id := a.positional(0, "an attempt id")
		tr.withLabel(label, func() { b.finished(id) })
	case "fail":
		positionals = 1
		id := a.positional(0, "an attempt id")
		tr.withLabel(label, func() { b.failed(id) })
	case "reward":
		positionals = 1
		id := a.positional(0, "an attempt id")
		pass := a.flag(1, "pass")
		p, total := a.tests()
		tr.withLabel(label, func() { b.reward(id, pass, p, total) })
	case "close":
		positionals = 1
		id := a.positional(0, "a group id")
		tr.withLabel(label, func() { b.closed(id) })
	case "policy":
		positionals = 1
		v := atoi(a, "version", a.positional(0, "a version"))
		tr.withLabel(label, func() { b.policy(v) })
	case "gradient":
		positionals = 0
		batch := a.int("batch", 0)
		if !a.has("batch") {
			a.fail("gradient needs batch=")
		}
		digest := a.str("digest", "sealed")
		if digest == "sealed" {
			if batch < 1 || int(batch) > len(tr.sealed) {
				a.fail("digest=sealed: batch %d was not sealed; name a digest", batch)
			} else {
				digest = tr.sealed[batch-1]
			}
		} else if k, ok := strings.CutPrefix(digest, "sealed:"); ok {
			i := atoi(a, "digest=sealed:", k)
			if i < 1 || int(i) > len(tr.sealed) {
				a.fail("digest=%s: no such batch was sealed", digest)
			} else {
				digest = tr.sealed[i-1]
			}
		}
		tr.withLabel(label, func() { b.gradient(batch, digest) })
	case "rollout":
		positionals = 1
		id, group := a.positional(0, "an attempt id"), a.need("group")
		pass := a.flag(1, "pass")
		p, total := a.tests()
		task, retryOf := tr.taskOf(a, group), a.str("retry_of", "")
		vs, tokens := a.segmentLists(), a.int("tokens", 10)
		if !a.has("v") {
			vs = [][]events.VersionSegment{events.SingleVersion(0)}
		}
		b.attemptOf(id, group, task, retryOf)
		for n, segs := range vs {
			b.segmentedTurn(id, n, segs, tokens)
		}
		b.finished(id).reward(id, pass, p, total)
	case "probes":
		positionals = 1
		id, task, n, passes := a.positional(0, "a group id"), a.need("task"), a.int("n", 0), a.int("passes", 0)
		if n < 1 || passes > n {
			a.fail("probes needs n= attempts (at least 1) and passes= of them (at most n)")
		} else {
			probes(b, id, task, int(n), int(passes))
		}
	case "pad":
		positionals = 1
		n := atoi(a, "count", a.positional(0, "a count"))
		for range n {
			b.policy(0)
		}
	default:
		return nil, fmt.Errorf("unknown fact %q (see testdata/rules/README.md)", a.cmd)
	}
	if err := a.done(positionals); err != nil {
		b.evs = b.evs[:from]
		return nil, err
	}
	if label != "" && len(b.evs)-from != 1 {
		return nil, fmt.Errorf("id= labels one fact; %s stands for %d", a.cmd, len(b.evs)-from)
	}
	out := make([]pendingRecord, 0, len(b.evs)-from)
	for _, ev := range b.evs[from:] {
		out = append(out, pendingRecord{ev: ev})
	}
	return out, nil
}

// withLabel builds one fact; under a label already used it takes that
// fact's event number, so it carries the same id and clock.
func (tr *transcript) withLabel(label string, build func()) {
	if label == "" {
		build()
		return
	}
	if n, ok := tr.labels[label]; ok {
		saved := tr.b.n
		tr.b.n = n - 1
		build()
		tr.b.n = saved
		return
	}
	build()
	tr.labels[label] = tr.b.n
}

// taskOf is an attempt's task: task= or its group's.
func (tr *transcript) taskOf(a *factArgs, group string) string {
	if a.has("task") {
		return a.str("task", "")
	}
	task, ok := tr.b.groups[group]
	if !ok {
		a.fail("group %s has not started: say task=", group)
	}
	return task
}
