package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/internal/httpx"
	"github.com/rolloutledger/rolloutledger/services/proxy"
)

func newProxyCmd(g *globals) *cobra.Command {
	var o proxy.Options
	var listen, upstreams string
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Record an agent's turns exactly as its inference engine saw them (OpenAI-compatible HTTP in front of vLLM, SGLang or llama.cpp)",
		Long: `proxy sits between an agent harness and its inference engine and answers as the
engine does. Point the harness's base URL at

    http://LISTEN/r/{run}/a/{attempt}/v1

(ids percent-encoded; or send the headers X-Rolloutledger-Run and
X-Rolloutledger-Attempt). Every chat or completion answer becomes a
turn.generated fact with the engine's own token ids and log-probs, related to
the attempt's earlier turns by token prefix; tool calls become tool.called
facts when the next request carries their outputs. A turn is in the spool
(synced) before the harness gets the answer's last byte, and reaches the
ledger's ingest (--ledger) from there, so the ledger may be away for a while.
The scheduler still writes run.started, groups, attempts and rewards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger("json")
			if err != nil {
				return err
			}
			for u := range strings.SplitSeq(upstreams, ",") {
				if u = strings.TrimSpace(u); u != "" {
					o.Upstreams = append(o.Upstreams, u)
				}
			}
			if o.Token == "" {
				o.Token = os.Getenv("ROLLOUTLEDGER_TOKEN")
			}
			if o.AdminToken == "" {
				o.AdminToken = os.Getenv("ROLLOUTLEDGER_PROXY_ADMIN_TOKEN")
			}
			o.Logger = log
			return runProxy(cmd.Context(), listen, o, func(addr string) {
				fmt.Fprintf(g.stdout, "rolloutledger proxy: listening on http://%s, engine %s at %s, ledger %s, spool %s\n",
					addr, o.Engine, strings.Join(o.Upstreams, ","), o.Ledger, o.SpoolDir)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8090", "HTTP listen address")
	f.StringVar(&upstreams, "upstream", "", "the engines' base URLs, comma-separated (an attempt always goes to the same one)")
	f.StringVar(&o.Engine, "engine", "", "the engine: vllm, sglang or llamacpp")
	f.StringVar(&o.Ledger, "ledger", "http://127.0.0.1:7070", "the ledger's HTTP base URL (its ingest)")
	f.StringVar(&o.Token, "token", "", "bearer token for the ledger, a producer token scoped to the runs (default $ROLLOUTLEDGER_TOKEN); never sent to an engine")
	f.StringVar(&o.SpoolDir, "spool", "./.rolloutledger-proxy", "directory of the spool: turns not yet acknowledged by the ledger, and each attempt's state")
	f.Int64Var(&o.SpoolMaxBytes, "spool-max-bytes", proxy.DefaultSpoolMaxBytes, "cap on facts waiting for the ledger; past it recorded requests get 503")
	f.BoolVar(&o.Strict, "strict", false, "refuse requests that name no attempt or an attempt the ledger has no attempt.started for (asked once per attempt), and turns whose token ids cannot be verified")
	f.StringVar(&o.AdminToken, "admin-token", "", "token required by POST /admin/weight-version and the engines' update routes (default $ROLLOUTLEDGER_PROXY_ADMIN_TOKEN; unset: loopback clients only)")
	f.Int64Var(&o.PolicyVersion, "policy-version", 0, "the policy version the engines serve at start, until the trainer announces another")
	f.StringVar(&o.Source, "source", proxy.DefaultSource, "producer identity written into every fact")
	f.BoolVar(&o.NoVocabulary, "no-vocabulary", false, "do not register the engine's vocabulary (vocabulary.registered, once per run, in the background; llama.cpp only)")
	f.Int64Var(&o.MaxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body accepted")
	f.DurationVar(&o.AttemptRetention, "attempt-retention", proxy.DefaultAttemptRetention, "how long after its last answer an attempt's prefix state stays in the spool; an attempt back after that has its next prompt recorded whole (negative: for ever)")
	return cmd
}

// runProxy serves the proxy on listen until ctx ends; ready is called with
// the bound address.
func runProxy(ctx context.Context, listen string, o proxy.Options, ready func(addr string)) error {
	s, err := proxy.New(o)
	if err != nil {
		return err
	}
	s.Start(ctx)
	if err := s.Probe(ctx); err != nil {
		if o.Strict {
			_ = s.Close()
			return err
		}
		o.Logger.Warn("proxy: engine probe", "err", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("proxy: --listen %s: %w", listen, err)
	}
	srv, ln := httpx.NewServer(ln, s.Handler(), httpx.ServerOptions{}, o.Logger)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	ready(ln.Addr().String())
	select {
	case <-ctx.Done():
	case err = <-done:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serr := srv.Shutdown(sctx)
	cerr := s.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, serr, cerr)
}
