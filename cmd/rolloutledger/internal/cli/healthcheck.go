package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd is the container health probe: the image has no shell,
// curl or wget, so the binary asks its own server.
func newHealthcheckCmd(g *globals) *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when a running service answers GET /healthz with 200",
		Long: `healthcheck asks a running rolloutledger serve (or dev) for GET /healthz and
exits 0 when it answers 200 OK (the service is up and reaches Kafka), 1
otherwise, printing why. It is the container image's health probe.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:7070/healthz", "health endpoint to ask")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("healthcheck: --url %q: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("healthcheck: %w", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthcheck: %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		fmt.Fprintln(g.stdout, strings.TrimSpace(string(body)))
		return nil
	}
	return cmd
}
