package simulate

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// Readable text (catalogue version 2, docs/design.md §18.3–§18.4): task
// prompts, completion text and tool calls' input and output, drawn with
// [Options.Text] from a PRNG stream of their own, so a run with text is the
// same run as one without, plus the text.
//
// Text is ASCII, so any byte is a character boundary, and each text keeps
// at most textBound bytes, the rest counted in its *_cut field, as a
// producer that bounds what it logs would: the log stays near its size
// without text, and the cut fields are exercised.

// textBound is the most bytes of one text the simulator keeps.
const textBound = 2048

// bytesPerToken turns token counts into text lengths (English and code).
const bytesPerToken = 4

var (
	modules = []string{"parser", "config", "cli", "scheduler", "cache", "auth", "storage", "http_client",
		"tokenizer", "metrics", "retry", "serializer", "graph", "planner", "io_utils", "router"}
	symbols = []string{"parse_args", "load_config", "resolve_path", "flush", "retry_with_backoff", "encode",
		"decode", "merge_ranges", "lookup", "normalize", "split_lines", "open_session", "validate", "apply_patch"}
	bugs = []string{
		"an off-by-one error when the input ends without a newline",
		"a None that leaks through when the config file is empty",
		"a race between the writer and the flush on shutdown",
		"timezone-naive timestamps compared with aware ones",
		"a cache key that ignores the query string",
		"an exception swallowed inside the retry loop",
		"Windows path separators in the fixture paths",
		"a generator consumed twice",
	}
	thoughts = []string{
		"Let me look at how %s is called before changing anything.",
		"The traceback points at %s, so the bug is probably in its edge cases.",
		"I think the failing assertion comes from %s returning early.",
		"Before editing, I want a minimal reproduction of the failure in %s.",
		"The tests for %s cover the happy path only; the regression must be elsewhere.",
		"That output confirms my guess: %s mishandles the empty case.",
		"I'll check whether %s is used anywhere else, so the fix does not break callers.",
		"Reading the diff again, the change to %s looks right, but the fixture still uses the old format.",
		"Running the whole suite takes a while; I'll run only the tests touching %s first.",
		"Hmm, %s is imported lazily, which explains why the first call is slow.",
	}
	testNames = []string{"test_roundtrip", "test_empty_input", "test_unicode", "test_large_file", "test_retry",
		"test_concurrent_flush", "test_defaults", "test_invalid_path", "test_merge", "test_timeout"}
)

// textStream is the PRNG stream of an attempt's text.
func (m *model) textStream(a *attempt) *rand.Rand {
	return rand.New(rand.NewPCG(m.seed^saltText, a.serial))
}

// bounded keeps the first textBound bytes of s (ASCII) and counts the rest.
func bounded(s string) (string, int64) {
	if len(s) <= textBound {
		return s, 0
	}
	return s[:textBound], int64(len(s) - textBound)
}

// fill writes sentences drawn by next until b holds n bytes, then cuts it
// at n: a text of exactly n bytes.
func fill(b *strings.Builder, n int, next func() string) {
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(next())
	}
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// taskPrompt is a task's statement: promptTokens of it, past the harness's
// cached prefix, in readable sentences.
func taskPrompt(t *task, seed uint64) (string, int64) {
	h := fnv.New64a()
	h.Write([]byte(t.id))
	r := rand.New(rand.NewPCG(seed^saltText, h.Sum64()))
	mod := pick(r, modules)
	var b strings.Builder
	fmt.Fprintf(&b, "Repository task %s (%s, tier %d). The test suite fails in tests/test_%s.py: %s in %s(). "+
		"Find the cause, fix it without changing the public API, and make the whole suite pass.",
		t.id, t.source, t.tier, mod, pick(r, bugs), pick(r, symbols))
	n := int(max(t.promptTokens-harnessPrefixTokens, 0)) * bytesPerToken
	full := b.String()
	if len(full) < n {
		b.Reset()
		b.WriteString(full)
		fill(&b, n, func() string {
			return fmt.Sprintf("Note: %s() in src/%s.py is also used by %s.", pick(r, symbols), pick(r, modules), pick(r, modules))
		})
		full = b.String()[:n]
	}
	return bounded(full)
}

// toolText draws a tool call's input and its output (outputBytes long,
// bounded).
func toolText(r *rand.Rand, tl *tool) (input string, output string, outputCut int64) {
	mod, sym := pick(r, modules), pick(r, symbols)
	var line func() string
	switch tl.name {
	case "bash":
		input = pick(r, []string{
			fmt.Sprintf("grep -rn %q src/ | head -50", sym),
			fmt.Sprintf("python -c 'import %s; print(%s.%s.__doc__)'", mod, mod, sym),
			fmt.Sprintf("git log --oneline -n 20 -- src/%s.py", mod),
			fmt.Sprintf("ls -la src/ tests/ && wc -l src/%s.py", mod),
			"make build 2>&1 | tail -n 40",
		})
		if tl.toFile {
			input += fmt.Sprintf(" > /tmp/out-%d.log 2>&1", r.IntN(1000))
		}
		if tl.background {
			input = "nohup python -m " + mod + ".server --port 8080 &"
		}
		line = func() string {
			return fmt.Sprintf("src/%s.py:%d:    result = %s(value, strict=%v)", pick(r, modules), 1+r.IntN(900), pick(r, symbols), r.IntN(2) == 0)
		}
	case "edit":
		input = fmt.Sprintf(`{"path":"src/%s.py","old":"    if not %s:\n        return None","new":"    if %s is None:\n        return []"}`, mod, sym, sym)
		line = func() string {
			return fmt.Sprintf("Edited src/%s.py: 2 lines replaced at line %d.", mod, 1+r.IntN(400))
		}
	case "run_tests":
		input = fmt.Sprintf("pytest -q tests/test_%s.py", mod)
		line = func() string {
			st := pick(r, []string{"PASSED", "PASSED", "PASSED", "FAILED"})
			return fmt.Sprintf("tests/test_%s.py::%s %s", mod, pick(r, testNames), st)
		}
	default:
		input = fmt.Sprintf("src/%s.py", mod)
		line = func() string {
			return fmt.Sprintf("def %s(value, strict=False):  # %s", pick(r, symbols), pick(r, []string{"noqa", "TODO: simplify", "hot path", "see #412"}))
		}
	}
	if tl.timedOut {
		input = fmt.Sprintf("pytest -q tests/ -k %s", pick(r, testNames))
	}
	n := int(min(tl.outputBytes, textBound))
	if n == 0 {
		return input, "", 0
	}
	var b strings.Builder
	b.Grow(n + 128)
	for b.Len() < n {
		b.WriteString(line())
		b.WriteByte('\n')
	}
	return input, b.String()[:n], tl.outputBytes - int64(n)
}

// completionText is a turn's completion: its reasoning, then the calls it
// makes, completion tokens long in all; the kept text is its first
// textBound bytes, and only those are drawn.
func completionText(r *rand.Rand, completion int64, calls []string) (string, int64) {
	var tail strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&tail, "\n<tool_call>%s</tool_call>", c)
	}
	full := max(int(completion)*bytesPerToken, tail.Len())
	reasoning := full - tail.Len()
	var b strings.Builder
	b.Grow(min(full, textBound) + 160)
	fill(&b, min(reasoning, textBound), func() string { return fmt.Sprintf(pick(r, thoughts), pick(r, symbols)+"()") })
	s := b.String()[:min(reasoning, textBound)]
	if reasoning <= textBound {
		// The whole reasoning fits: end it after a sentence.
		if i := strings.LastIndex(s, ". "); i >= 0 {
			s = s[:i+1]
		}
	}
	s += tail.String()
	s = s[:min(len(s), textBound)]
	return s, int64(full - len(s))
}
