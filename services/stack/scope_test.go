package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/events"
	"github.com/rolloutledger/rolloutledger/internal/auth"
	"github.com/rolloutledger/rolloutledger/internal/testenv"
	"github.com/rolloutledger/rolloutledger/services/stack"
)

// The runs of the scope tests: the scoped tokens (producer-a, reader-a,
// trainer-a) may touch runs matching run-a*, and not secretRun.
const (
	ownRun    = "run-a1"
	secretRun = "secret-run-b"
)

// scopeFixture is an authenticated stack holding two simulated runs, each
// with a sealed batch: ownRun, which the scoped tokens may read, and
// secretRun, which they may not.
type scopeFixture struct {
	*authStack
	// task is a task of each run, by run.
	task map[string]string
	// group is a train group of each run (the explorer's routes name one).
	group map[string]string
	// secrets are strings only a read of secretRun's data answers with.
	secrets []string
}

func startScopeFixture(t testing.TB) *scopeFixture {
	t.Helper()
	kc, _ := testenv.EmbeddedKafka(t, "")
	s := startAuthStack(t, kc, stack.Options{})
	fx := &scopeFixture{authStack: s, task: map[string]string{}, group: map[string]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	for i, run := range []string{ownRun, secretRun} {
		o := simulate.Options{URL: s.URL(), Run: run, Seed: uint64(11 + i), Tasks: 6, Steps: 1, BatchGroups: 2, GroupSize: 2,
			MaxTurns: 8, Workers: 1, Token: secrets["admin"]}
		plan, err := simulate.Generate(o, run)
		if err != nil {
			t.Fatal(err)
		}
		fx.task[run] = plan.Tasks[0].Task
		fx.group[run] = plan.Groups[0].Group
		go func() {
			_, err := simulate.Run(ctx, o)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("simulate: %v", err)
		}
	}
	for _, run := range []string{ownRun, secretRun} {
		// As long as the projector keeps folding: on a loaded machine its
		// first windows can take minutes.
		testenv.CheckProgress(t, 60*time.Second, run+" has a sealed batch", func() (bool, int64) {
			resp, _ := s.do(t, nil, http.MethodGet, "/v1/runs/"+run+"/batches/1", "admin", nil)
			return resp.StatusCode == http.StatusOK, s.log.Count(`"msg":"window committed"`)
		})
	}
	_, b := s.do(t, nil, http.MethodGet, "/v1/runs/"+secretRun+"/batches/1", "admin", nil)
	var m struct {
		Digest string `json:"digest"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Digest == "" {
		t.Fatalf("manifest of %s: %s (%v)", secretRun, b, err)
	}
	fx.secrets = []string{m.Digest, `"run":"` + secretRun + `"`}
	return fx
}

// leaks reports which of secretRun's data body holds.
func (fx *scopeFixture) leaks(body []byte) []string {
	var out []string
	for _, s := range fx.secrets {
		if strings.Contains(string(body), s) {
			out = append(out, s)
		}
	}
	return out
}

// rawDo sends a request whose target is path exactly as given — no
// cleaning, no re-escaping, "//" kept — over a connection of its own, and
// reads the answer.
func (fx *scopeFixture) rawDo(t testing.TB, method, path, as string, body []byte) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", fx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer %s\r\n", method, path, secrets[as])
	if body != nil {
		fmt.Fprintf(&req, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// The cases an outside probe found: a scoped token reached another run's
// data through a path the router decodes but the old scope check did not
// recognise. Each is refused with 403, for every scoped role, and logged.
func TestScopeEncodedPaths(t *testing.T) {
	fx := startScopeFixture(t)
	task := strings.ReplaceAll(fx.task[secretRun], "/", "%2F")
	paths := []string{
		"/v1/%72uns/" + secretRun + "/batches/1/samples",
		"/v1/%72uns/" + secretRun + "/batches/1",
		"/%761/runs/" + secretRun + "/batches/1/samples",
		"/v1/run%73/" + secretRun + "/batches/1",
		"/v1/%72uns/" + secretRun + "/batches/next?after=0&wait=0s",
		"/%76%31/%72%75%6e%73/" + secretRun + "/batches/next?after=0&wait=0s",
		"/v1/%72uns/" + secretRun + "/tasks/" + task,
		"/v1/run%73/" + secretRun + "/tasks/" + fx.task[secretRun],
		"/v1/%72uns/" + secretRun + "/status",
		"/%761/runs/" + secretRun + "/status",
		"/v1/runs/%73ecret-run-b/status",
		"/v1/runs/" + secretRun + "/status",
	}
	for _, as := range []string{"reader-a", "trainer-a", "producer-a"} {
		for _, p := range paths {
			t.Run(as+" GET "+p, func(t *testing.T) {
				code, body := fx.rawDo(t, http.MethodGet, p, as, nil)
				if code != http.StatusForbidden {
					t.Errorf("got %d %.200s, want 403", code, body)
				}
				if l := fx.leaks(body); len(l) > 0 {
					t.Errorf("the answer holds %s's data %q", secretRun, l)
				}
			})
		}
	}
	// The same routes for the token's own run answer, so the refusals
	// above are the scope's, not a path the router does not know.
	own := map[string][]string{
		"reader-a":   {"/v1/%72uns/" + ownRun + "/batches/1/samples", "/%761/runs/" + ownRun + "/status", "/v1/run%73/" + ownRun + "/tasks/" + fx.task[ownRun]},
		"trainer-a":  {"/v1/%72uns/" + ownRun + "/batches/1", "/v1/%72uns/" + ownRun + "/batches/next?after=0&wait=0s"},
		"producer-a": {"/v1/%72uns/" + ownRun + "/tasks/" + fx.task[ownRun]},
	}
	for as, ps := range own {
		for _, p := range ps {
			if code, body := fx.rawDo(t, http.MethodGet, p, as, nil); code != http.StatusOK {
				t.Errorf("%s GET %s: got %d %.200s, want 200", as, p, code, body)
			}
		}
	}
	// Appends through an encoded path are decided by the events' runs.
	before := endOffsetsSum(t, fx.kc)
	for _, as := range []string{"producer-a", "trainer-a"} {
		for _, p := range []string{"/v1/%65vents", "/%761/events"} {
			code, out := fx.rawDo(t, http.MethodPost, p, as, body(t, runEvents(secretRun, 2)))
			if code != http.StatusForbidden {
				t.Errorf("%s POST %s for %s: got %d %.200s, want 403", as, p, secretRun, code, out)
			}
		}
	}
	if after := endOffsetsSum(t, fx.kc); after != before {
		t.Errorf("refused appends moved the facts topic's end offsets from %d to %d", before, after)
	}
	// Refused reads are logged like refused writes: the token's name, the
	// status, and no secret.
	logs := fx.log.String()
	for _, as := range []string{"reader-a", "trainer-a", "producer-a"} {
		if !strings.Contains(logs, fmt.Sprintf(`"token":%q`, as)) {
			t.Errorf("no refusal of %s in the log", as)
		}
	}
	for as, secret := range secrets {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds the secret of %s", as)
		}
	}
}

// scopedCallers are the tokens limited to run-a*.
var scopedCallers = []string{"reader-a", "trainer-a", "producer-a"}

// variant is a request built from a route template: its wildcards filled,
// then any subset of its characters percent-encoded, and perhaps ;params,
// dot segments, doubled or trailing slashes, another method, or junk.
type variant struct {
	method, path string
	// plain says only characters other than "/" were percent-encoded:
	// such a path must route exactly like the unencoded one.
	plain bool
}

// pathDecorations are the shapes that differ between a router, a proxy
// and a second parser of the path.
var (
	params      = []string{";", ";x", ";x=1", ";run=" + ownRun, ";jsessionid=0"}
	dotSegments = []string{"/.", "/..", "/%2e", "/%2E%2e", "/" + ownRun + "/..", "/.%2e"}
	otherVerbs  = []string{http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions}
)

// routeQuery is the query a route's path needs to be answered 200.
func routeQuery(path string) string {
	switch {
	case strings.HasSuffix(path, "/batches/next"):
		return "?after=0&wait=0s"
	case strings.HasSuffix(path, "/explore/search"):
		return "?q=a"
	}
	return ""
}

// makeVariant builds a variant of the route pattern for run. r chooses
// everything; junk, when not empty, is inserted somewhere (the fuzz
// target's free text), escaped where a request line could not carry it.
func makeVariant(r *rand.Rand, pattern, run, task, group, junk string) variant {
	method, tmpl, _ := strings.Cut(pattern, " ")
	filled := strings.NewReplacer("{run}", run, "{seq}", "1", "{task...}", task, "{group...}", group, "{attempt...}", group+"/a0").Replace(tmpl)
	query := routeQuery(tmpl)
	v := variant{method: method, plain: true}
	// Percent-encode any subset of the characters, in either case.
	p := []float64{0, 0.1, 0.3, 0.7, 1}[r.IntN(5)]
	slashes := r.IntN(8) == 0
	var b strings.Builder
	for i := 0; i < len(filled); i++ {
		c := filled[i]
		if (c != '/' || slashes) && r.Float64() < p {
			if r.IntN(2) == 0 {
				fmt.Fprintf(&b, "%%%02X", c)
			} else {
				fmt.Fprintf(&b, "%%%02x", c)
			}
			v.plain = v.plain && c != '/'
			continue
		}
		b.WriteByte(c)
	}
	path := b.String()
	// Decorations, each now and then.
	slashesAt := func() []int {
		var at []int
		for i := 0; i < len(path); i++ {
			if path[i] == '/' {
				at = append(at, i)
			}
		}
		return at
	}
	// insert puts s before a "/" of the path (or, with end, at its end).
	insert := func(s string, end bool) {
		at := slashesAt()
		if end {
			at = append(at[min(1, len(at)):], len(path))
		}
		if len(at) == 0 {
			return
		}
		i := at[r.IntN(len(at))]
		path = path[:i] + s + path[i:]
		v.plain = false
	}
	if r.IntN(6) == 0 { // ;params at the end of a segment
		insert(params[r.IntN(len(params))], true)
	}
	if r.IntN(6) == 0 { // a dot segment
		insert(dotSegments[r.IntN(len(dotSegments))], false)
	}
	if r.IntN(6) == 0 { // a doubled slash
		insert("/", false)
	}
	if r.IntN(10) == 0 {
		path += "/"
		v.plain = false
	}
	if junk != "" {
		i := 1 + r.IntN(len(path))
		path = path[:i] + escapeJunk(junk) + path[i:]
		v.plain = false
	}
	if r.IntN(8) == 0 {
		v.method = otherVerbs[r.IntN(len(otherVerbs))]
		v.plain = false
	}
	v.path = path + query
	return v
}

// escapeJunk percent-encodes what a request target cannot carry as is.
func escapeJunk(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && i < 64; i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '%' && badEscape(s, i) {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// badEscape reports whether the % at s[i] does not start a valid escape, which
// would make the whole request line unreadable rather than explore routing.
func badEscape(s string, i int) bool {
	hex := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
	return i+2 >= len(s) || !hex(s[i+1]) || !hex(s[i+2])
}

// scopeProbe sends variants of every route to the fixture as scoped
// callers, and checks what a scoped token must never get.
type scopeProbe struct {
	fx     *scopeFixture
	routes []auth.Route
	bodies map[string][]byte // POST bodies by caller: facts of secretRun the role may write
	// plain counts, per route, the plain variants for the caller's own
	// run that the router answered like the unencoded path.
	plain map[string]int
}

func newScopeProbe(t testing.TB, fx *scopeFixture) *scopeProbe {
	facts := goldenFacts(t, secretRun)
	trainer := facts[events.TypePolicyPublished]
	return &scopeProbe{fx: fx, routes: fx.Routes(), plain: map[string]int{}, bodies: map[string][]byte{
		"producer-a": body(t, runEvents(secretRun, 2)),
		"trainer-a":  body(t, []events.Event{trainer}),
		"reader-a":   body(t, runEvents(secretRun, 1)),
	}}
}

// check sends one variant of route i for secretRun as caller, and the same
// variant for the caller's own run.
func (p *scopeProbe) check(t testing.TB, i int, as string, seed uint64, junk string) {
	t.Helper()
	route := p.routes[i%len(p.routes)]
	pick := func(run string) variant {
		return makeVariant(rand.New(rand.NewPCG(seed, uint64(i))), route.Pattern, run, p.fx.task[run], p.fx.group[run], junk)
	}
	v := pick(secretRun)
	var b []byte
	if v.method == http.MethodPost || v.method == http.MethodPut {
		b = p.bodies[as]
	}
	code, out := p.fx.rawDo(t, v.method, v.path, as, b)
	if route.Scoped && code >= 200 && code < 300 {
		t.Errorf("%s %s %s as %s (route %s): got %d %.200s, want a refusal", v.method, v.path, secretRun, as, route.Pattern, code, out)
	}
	if v.method == http.MethodPost && code >= 200 && code < 300 {
		t.Errorf("%s %s as %s appended to %s: %d %.200s", v.method, v.path, as, secretRun, code, out)
	}
	if l := p.fx.leaks(out); len(l) > 0 {
		t.Errorf("%s %s as %s (route %s): %d with %s's data %q", v.method, v.path, as, route.Pattern, code, secretRun, l)
	}
	// The same variant for the caller's own run: a path that was only
	// percent-encoded must be answered like the plain one, which shows the
	// refusals above are the scope's and not a path the router missed.
	if !route.Scoped {
		return
	}
	own := pick(ownRun)
	if !own.plain || own.method != strings.SplitN(route.Pattern, " ", 2)[0] {
		return
	}
	plainPath := strings.NewReplacer("{run}", ownRun, "{seq}", "1", "{task...}", p.fx.task[ownRun],
		"{group...}", p.fx.group[ownRun], "{attempt...}", p.fx.group[ownRun]+"/a0").Replace(strings.SplitN(route.Pattern, " ", 2)[1])
	plainPath += routeQuery(plainPath)
	want, _ := p.fx.rawDo(t, own.method, plainPath, as, nil)
	got, out := p.fx.rawDo(t, own.method, own.path, as, nil)
	if got != want {
		t.Errorf("%s %s as %s: got %d %.200s, want %d like %s", own.method, own.path, as, got, out, want, plainPath)
	}
	if got == http.StatusOK && own.path != plainPath {
		p.plain[route.Pattern]++
	}
}

// A scoped token never gets another run's data and never appends to
// another run, however the path is spelt: every route the stack serves,
// in seeded variants — any subset of characters percent-encoded, ;params,
// dot segments, doubled and trailing slashes, other methods.
func TestScopeProperty(t *testing.T) {
	fx := startScopeFixture(t)
	p := newScopeProbe(t, fx)
	before := endOffsetsSum(t, fx.kc)
	n := 1200
	if testing.Short() {
		n = 300
	}
	r := rand.New(rand.NewPCG(20261201, 12))
	for i := range n {
		p.check(t, i, scopedCallers[r.IntN(len(scopedCallers))], r.Uint64(), "")
		if t.Failed() {
			break
		}
	}
	if after := endOffsetsSum(t, fx.kc); after != before {
		t.Errorf("scoped callers appended %d facts", after-before)
	}
	// Encoded variants did reach the handlers of each run-scoped route
	// for the caller's own run: the property is about routed requests.
	for _, route := range p.routes {
		if route.Scoped && route.Pattern != "GET /v1/runs/{run}/tasks" && p.plain[route.Pattern] == 0 {
			t.Errorf("no percent-encoded variant of %s reached its handler; the property checked nothing there", route.Pattern)
		}
	}
}

// FuzzScope explores the same property with the fuzzer's choices of route,
// caller, mutations and free text inserted in the path.
func FuzzScope(f *testing.F) {
	for i, junk := range []string{"", ";", "%2e%2e/", "//", "%2F", "..;/", "%252e", "\x00", "run-a1/../"} {
		f.Add(uint8(i), uint8(i), uint64(i)*0x9e3779b97f4a7c15, junk)
	}
	fx := startScopeFixture(f)
	p := newScopeProbe(f, fx)
	before := endOffsetsSum(f, fx.kc)
	f.Fuzz(func(t *testing.T, route, caller uint8, seed uint64, junk string) {
		p.check(t, int(route), scopedCallers[int(caller)%len(scopedCallers)], seed, junk)
		if after := endOffsetsSum(t, fx.kc); after != before {
			t.Fatalf("a scoped caller appended %d facts", after-before)
		}
	})
}

// Every route the stack serves is registered through the router, and every
// one that names a run is held to the token's run scope.
func TestEveryRunRouteIsScoped(t *testing.T) {
	kc, _ := testenv.EmbeddedKafka(t, "")
	s := startAuthStack(t, kc, stack.Options{})
	routes := s.Routes()
	if len(routes) < 9 {
		t.Fatalf("got %d routes, want every route of ingest, api, health and metrics: %+v", len(routes), routes)
	}
	for _, r := range routes {
		_, path, _ := strings.Cut(r.Pattern, " ")
		names := strings.Contains(path, "{run}") || strings.HasPrefix(path, "/v1/runs/")
		if names != r.Scoped {
			t.Errorf("route %s: scoped %v, want %v", r.Pattern, r.Scoped, names)
		}
		// The explorer's page and assets carry no data (docs/design.md §15.7).
		if r.Access == auth.Open && r.Pattern != "GET /healthz" && r.Pattern != "GET /metrics" && r.Pattern != "GET /ui" && r.Pattern != "GET /ui/{$}" && r.Pattern != "GET /ui/{file}" {
			t.Errorf("route %s is open", r.Pattern)
		}
	}
}
