package bench

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Machine describes where the figures were measured.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPU      string `json:"cpu"`
	MemoryGB string `json:"memory"`
	Go       string `json:"go"`
	Kafka    string `json:"kafka"`
	Postgres string `json:"postgres"`
	Load     string `json:"load"`
}

func describeMachine(ctx context.Context, o Options) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Kafka: "unknown", Postgres: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				m.MemoryGB = f[1] + " kB"
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if o.KafkaLibs != "" {
		jars, _ := filepath.Glob(filepath.Join(o.KafkaLibs, "kafka-clients-*.jar"))
		re := regexp.MustCompile(`kafka-clients-([0-9][^/]*)\.jar$`)
		for _, j := range jars {
			if s := re.FindStringSubmatch(j); s != nil {
				m.Kafka = "Apache Kafka " + s[1] + " (client jars; broker at " + strings.Join(o.Brokers, ",") + ")"
			}
		}
	}
	if o.DatabaseURL != "" {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if c, err := pgx.Connect(cctx, o.DatabaseURL); err == nil {
			var v string
			if c.QueryRow(cctx, "SHOW server_version").Scan(&v) == nil {
				m.Postgres = "PostgreSQL " + v
			}
			c.Close(cctx)
		}
	}
	return m
}
