package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	json "github.com/segmentio/encoding/json"
)

// Probe asks the first engine what it is, and checks that a short
// chat completion comes back with ids and log-probs where the proxy looks
// for them. The engine's version goes into every turn. An engine that
// gives no ids is reported here, before any turn is lost to it.
func (s *Server) Probe(ctx context.Context) error {
	defer s.probeDone.Do(func() { close(s.probed) })
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	base := s.ups[0].String()
	get := func(path string) obj {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil
		}
		resp, err := s.o.Client.Do(req)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		if resp.StatusCode != http.StatusOK {
			return nil
		}
		o, _ := parseObj(raw)
		return o
	}
	version := ""
	switch s.o.Engine {
	case EngineLlamaCPP:
		if p := get("/props"); p != nil {
			version = p.str("build_info")
		}
	case EngineVLLM:
		if p := get("/version"); p != nil {
			version = p.str("version")
		}
	case EngineSGLang:
		for _, path := range []string{"/server_info", "/get_server_info"} {
			if p := get(path); p != nil {
				version = p.str("version")
				break
			}
		}
	}
	if len(version) > 128 {
		version = version[:128]
	}
	s.engineVersion.Store(&version)
	models := get("/v1/models")
	model := ""
	if models != nil {
		for _, raw := range models.arr("data") {
			var m obj
			if json.Unmarshal(raw, &m) == nil && m.str("id") != "" {
				model = m.str("id")
				break
			}
		}
	}
	if models == nil {
		return fmt.Errorf("proxy: the engine at %s does not answer GET /v1/models", s.ups[0].Host)
	}
	req := obj{}
	req.set("model", model)
	req.set("messages", []map[string]string{{"role": "user", "content": "ping"}})
	req.set("max_tokens", 4)
	req.set("temperature", 0)
	ex := newExchange(routeChat, identity{}, req)
	if err := prepare(s.o.Engine, ex); err != nil {
		return err
	}
	var ans obj
	if err := upstreamJSON(ctx, s.o.Client, base, "/v1/chat/completions", map[string]json.RawMessage(ex.req), &ans); err != nil {
		return fmt.Errorf("proxy: probe completion: %w", err)
	}
	ex.cap.readAnswer(newAnswer(ans), routeChat)
	c := &ex.cap
	// The probe asks whether answers carry ids and log-probs at all; a
	// turn whose counts disagree (llama.cpp merging the byte tokens of a
	// split character) is each turn's own check, tagged then.
	if !c.haveIDs || !c.haveLogprobs || len(c.ids) == 0 {
		return fmt.Errorf("proxy: the %s engine's chat answers carry no usable token ids (ids %d, log-probs %d, completion_tokens %d): turns will be tagged ids_mismatch",
			s.o.Engine, len(c.ids), len(c.logprobs), c.usageComplete)
	}
	s.o.Logger.Info("proxy: engine probed", "engine", s.o.Engine, "version", version, "model", model)
	return nil
}

// engineVersionOf is the engine's version as the probe found it ("" before
// the probe, or when the engine names none).
func (s *Server) engineVersionOf() string {
	if v := s.engineVersion.Load(); v != nil {
		return *v
	}
	return ""
}
