package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
)

// KafkaLibsEnv overrides where the Kafka jars are; by default they are in
// <repo>/.services/kafka/libs, where scripts/services.sh resolves them.
const KafkaLibsEnv = "ROLLOUTLEDGER_KAFKA_LIBS"

// KafkaCluster is a three-broker Apache Kafka cluster of the test's own on
// loopback: KRaft, every node both broker and controller, replication 3 and
// min.insync.replicas=2 by default. Tests kill and restart its brokers; the
// shared broker on 9092 is never touched.
type KafkaCluster struct {
	t       testing.TB
	java    string
	libs    string
	log4j   string
	dir     string
	mu      sync.Mutex
	brokers []*clusterBroker
}

type clusterBroker struct {
	id         int
	port, ctrl int
	dir        string
	cmd        *exec.Cmd
	exited     chan struct{}
}

// Addr is the broker's client address.
func (b *clusterBroker) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

// RepoRoot is the directory of the repository's go.mod, found upwards from
// the working directory (a package's directory under go test).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// clusterMu is held by the test whose cluster is running;
// clustersStarted counts the clusters of this test process.
var (
	clusterMu       sync.Mutex
	clustersStarted atomic.Int32
)

// StartKafkaCluster starts three brokers from the jars of
// $ROLLOUTLEDGER_KAFKA_LIBS (default <repo>/.services/kafka/libs) on free
// loopback ports with data in a temporary directory, waits until each
// answers a metadata request listing all three, and stops them when the
// test ends. Without java or the jars it skips, or fails in CI.
func StartKafkaCluster(t testing.TB) *KafkaCluster {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	libs := os.Getenv(KafkaLibsEnv)
	if libs == "" {
		libs = filepath.Join(root, ".services", "kafka", "libs")
	}
	if jars, _ := filepath.Glob(filepath.Join(libs, "kafka_2.13-*.jar")); len(jars) == 0 {
		Unavailable(t, "no Kafka jars in %s (scripts/services.sh resolves them; or set $%s)", libs, KafkaLibsEnv)
	}
	java := os.Getenv("JAVA")
	if java == "" {
		java = "java"
	}
	if _, err := exec.LookPath(java); err != nil {
		Unavailable(t, "no java to run the Kafka cluster: %v", err)
	}
	// The cluster's ports are fixed, so one cluster runs at a time in a
	// test process: parallel tests that each start one take turns. The
	// unlock is registered first, so it runs after the brokers are killed.
	clusterMu.Lock()
	t.Cleanup(clusterMu.Unlock)
	dir, err := os.MkdirTemp("", "rl-kafka-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	c := &KafkaCluster{t: t, java: java, libs: libs, log4j: filepath.Join(root, "scripts", "kafka", "log4j2.xml"), dir: dir}
	t.Cleanup(func() {
		for i := range c.brokers {
			c.Kill(i)
		}
		if t.Failed() {
			for _, b := range c.brokers {
				tail, _ := os.ReadFile(filepath.Join(b.dir, "logs", "server.log"))
				if len(tail) > 6000 {
					tail = tail[len(tail)-6000:]
				}
				t.Logf("broker %d log tail:\n%s", b.id, tail)
			}
		}
		os.RemoveAll(dir)
	})
	ports, err := clusterPorts()
	if err != nil {
		t.Fatal(err)
	}
	var voters []string
	for i := range 3 {
		b := &clusterBroker{id: i + 1, port: ports[i], ctrl: ports[3+i], dir: filepath.Join(dir, "node"+strconv.Itoa(i+1))}
		c.brokers = append(c.brokers, b)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", b.id, b.ctrl))
	}
	// A random id, as kafka-storage random-uuid makes; one that begins
	// with '-' would be read as an option by the tool's argument parser
	// (one run in 64), so the first byte is drawn again until it does not.
	var id [16]byte
	clusterID := "-"
	for clusterID[0] == '-' {
		_, _ = rand.Read(id[:])
		clusterID = base64.RawURLEncoding.EncodeToString(id[:])
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, b := range c.brokers {
		if err := os.MkdirAll(filepath.Join(b.dir, "logs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.dir, "server.properties"), []byte(brokerConfig(b, strings.Join(voters, ","))), 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			cmd := exec.Command(java, append(c.jvmFlags(b, "-Xmx128m", "format.log"), "kafka.tools.StorageTool", "format",
				"--cluster-id", clusterID, "--config", filepath.Join(b.dir, "server.properties"), "--ignore-formatted")...)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("format broker %d: %v\n%s", b.id, err, out)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range c.brokers {
		c.launch(i)
	}
	for i := range c.brokers {
		c.WaitReady(i)
	}
	return c
}

func brokerConfig(b *clusterBroker, voters string) string {
	return fmt.Sprintf(`process.roles=broker,controller
node.id=%d
controller.quorum.voters=%s
listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d
advertised.listeners=PLAINTEXT://127.0.0.1:%d
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%s
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
# Notice a dead broker within seconds, not the default 9 s / 30 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
replica.lag.time.max.ms=4000
controller.quorum.election.timeout.ms=1000
controller.quorum.fetch.timeout.ms=2000
message.max.bytes=2097152
replica.fetch.max.bytes=2097152
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
log.cleaner.threads=1
`, b.id, voters, b.port, b.ctrl, b.port, filepath.Join(b.dir, "data"))
}

// jvmFlags are small-footprint flags: three brokers share two cores with
// the test.
func (c *KafkaCluster) jvmFlags(b *clusterBroker, heap, logFile string) []string {
	return []string{heap, "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ActiveProcessorCount=2",
		"-Djava.awt.headless=true", "-Dlog4j2.configurationFile=" + c.log4j,
		"-Dkafka.logs.dir=" + filepath.Join(b.dir, "logs"), "-Dkafka.log.file=" + logFile,
		"-cp", filepath.Join(c.libs, "*")}
}

func (c *KafkaCluster) launch(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.brokers[i]
	out, err := os.OpenFile(filepath.Join(b.dir, "logs", "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.java, append(c.jvmFlags(b, "-Xmx384m", "server.log"), "kafka.Kafka", filepath.Join(b.dir, "server.properties"))...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		c.t.Fatalf("start broker %d: %v", b.id, err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(b.exited)
	}()
}

// Brokers are the client addresses of the three brokers.
func (c *KafkaCluster) Brokers() []string {
	var out []string
	for _, b := range c.brokers {
		out = append(out, b.Addr())
	}
	return out
}

// Config is a kafkalog configuration for the cluster with a fresh topic
// prefix: replication 3 and min.insync.replicas 2.
func (c *KafkaCluster) Config(t testing.TB, partitions int) kafkalog.Config {
	return kafkalog.Config{Brokers: c.Brokers(), TopicPrefix: UniquePrefix(t), Partitions: partitions,
		ReplicationFactor: 3, MinInsyncReplicas: 2}
}

// Kill kills broker i (0-based) with SIGKILL and waits until it is gone.
func (c *KafkaCluster) Kill(i int) {
	c.mu.Lock()
	b := c.brokers[i]
	cmd := b.cmd
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
	c.mu.Lock()
	b.cmd = nil
	c.mu.Unlock()
}

// Restart starts broker i again on its data and waits until it answers.
func (c *KafkaCluster) Restart(i int) {
	c.t.Helper()
	c.launch(i)
	c.WaitReady(i)
}

// Start starts broker i again without waiting for it: with two of three
// controllers down, none is ready until a second one is back.
func (c *KafkaCluster) Start(i int) { c.launch(i) }

// Running reports whether broker i's process is alive.
func (c *KafkaCluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokers[i].cmd != nil
}

// WaitReady waits until broker i answers a metadata request that lists all
// three brokers.
func (c *KafkaCluster) WaitReady(i int) {
	c.t.Helper()
	b := c.brokers[i]
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-b.exited:
			c.t.Fatalf("broker %d exited while starting; see %s", b.id, filepath.Join(b.dir, "logs"))
		default:
		}
		last = c.metadataOK(b.Addr())
		if last == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("broker %d not ready after 90 s: %v", b.id, last)
}

func (c *KafkaCluster) metadataOK(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	meta, err := kafkalog.ReadMetadata(ctx, kafkalog.Config{Brokers: []string{addr}})
	if err != nil {
		return err
	}
	if len(meta.Brokers) != 3 {
		return fmt.Errorf("metadata lists %d brokers", len(meta.Brokers))
	}
	return nil
}

// Leader returns the index of the broker leading partition part of topic.
func (c *KafkaCluster) Leader(topic string, part int) (int, error) {
	meta, err := c.partitionMeta(topic, part)
	if err != nil {
		return -1, err
	}
	for i, b := range c.brokers {
		if b.id == meta.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%s/%d: leader %d is not one of ours", topic, part, meta.Leader)
}

// InSync reports how many replicas of partition part of topic are in sync.
func (c *KafkaCluster) InSync(topic string, part int) (int, error) {
	meta, err := c.partitionMeta(topic, part)
	if err != nil {
		return 0, err
	}
	return len(meta.InSync), nil
}

func (c *KafkaCluster) partitionMeta(topic string, part int) (kafkalog.PartitionMetadata, error) {
	var last error
	for i, b := range c.brokers {
		if !c.Running(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		meta, err := kafkalog.ReadMetadata(ctx, kafkalog.Config{Brokers: []string{b.Addr()}}, topic)
		cancel()
		if err != nil {
			last = err
			continue
		}
		for _, p := range meta.Partitions {
			if p.Topic == topic && p.Partition == part && p.Err == nil {
				return p, nil
			}
		}
		last = fmt.Errorf("%s/%d not in the metadata of broker %d", topic, part, b.id)
	}
	if last == nil {
		last = errors.New("no broker running")
	}
	return kafkalog.PartitionMetadata{}, last
}

// Log returns the tail of broker i's server log.
func (c *KafkaCluster) Log(i int) string {
	data, _ := os.ReadFile(filepath.Join(c.brokers[i].dir, "logs", "server.log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(bytes.TrimSpace(data))
}

// KafkaClusterPortEnv overrides the first client port of the first cluster
// [19092]: brokers listen on it and the next two, controllers on the three
// ports 100 above; each later cluster of the process 300 above the one
// before. Fixed ports below the ephemeral range, so that no
// outgoing connection takes a killed broker's port before it restarts.
const KafkaClusterPortEnv = "ROLLOUTLEDGER_KAFKA_CLUSTER_PORT"

func clusterPorts() ([]int, error) {
	base := 19092
	if v := os.Getenv(KafkaClusterPortEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 || n > 65000 {
			return nil, fmt.Errorf("$%s=%q: want a port between 1024 and 65000", KafkaClusterPortEnv, v)
		}
		base = n
	}
	// Each cluster of a test process takes ports of its own (300 apart),
	// so a cluster never starts on ports the previous one's brokers and
	// their clients have only just let go of.
	base += 300 * int(clustersStarted.Add(1)-1)
	if base+102 > 32767 {
		return nil, fmt.Errorf("too many Kafka clusters in one test process for ports from %d below the ephemeral range", base)
	}
	ports := []int{base, base + 1, base + 2, base + 100, base + 101, base + 102}
	for _, p := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return nil, fmt.Errorf("the Kafka cluster's port %d is taken (another cluster test running? set $%s): %v", p, KafkaClusterPortEnv, err)
		}
		ln.Close()
	}
	return ports, nil
}
