package app_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/config"
	"paysvc/internal/ratelimit"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
)

// TestRedisClusterUnsupported is the README's stance on Redis Cluster, from
// a test: REDIS_URL has no form for a cluster (redis-cluster:// is
// refused), and a redis:// URL naming one node of a three-node cluster
// (Debian's redis-server, cluster-enabled, slots spread by redis-cli) gives
// a client that works only for the keys whose slots that node owns: the
// enqueues and rate-limit checks whose keys live on the other nodes fail
// with MOVED. The service needs a single primary (alone or behind Sentinel).
func TestRedisClusterUnsupported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster")
	}
	if _, err := config.RedisOptions("redis-cluster://127.0.0.1:7000,127.0.0.1:7001/0", ""); err == nil {
		t.Error("REDIS_URL redis-cluster://…: got accepted, want refused (no cluster form)")
	}

	dir := t.TempDir()
	var nodes []string
	for i := range 3 {
		addr := testenv.FreeAddr(t)
		// The cluster bus port is drawn too: Redis's default, the port +
		// 10000, can land in the kernel's ephemeral range, where another
		// process's outgoing connection may hold it and the node fails
		// to start (seen once in CI: port 24778, bus 34778).
		bus := testenv.FreeAddr(t)
		startDaemon(t, "redis-server", "--port", port(addr), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-port", port(bus), "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i))
		nodes = append(nodes, addr)
	}
	ctx := context.Background()
	first := redis.NewClient(&redis.Options{Addr: nodes[0]})
	defer first.Close()
	waitUntil(t, 10*time.Second, "the cluster nodes to answer", func() bool {
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n})
			err := c.Ping(ctx).Err()
			c.Close()
			if err != nil {
				return false
			}
		}
		return true
	})
	args := append([]string{"--cluster", "create"}, nodes...)
	if out, err := exec.Command("redis-cli", append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitUntil(t, 20*time.Second, "cluster_state:ok", func() bool {
		info, err := first.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})

	opts, err := config.RedisOptions("redis://"+nodes[0]+"/0", "")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewUniversalClient(opts)
	defer rdb.Close()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	limiter := ratelimit.New(rdb, 1000)
	var ok, moved int
	var other []string
	try := func(what string, err error) {
		switch {
		case err == nil:
			ok++
		case strings.Contains(err.Error(), "MOVED"):
			moved++
		default:
			other = append(other, fmt.Sprintf("%s: %v", what, err))
		}
	}
	for q := range tasks.Queues {
		for i := range 5 {
			_, err := client.EnqueueContext(ctx, asynq.NewTask("test:cluster", nil), asynq.Queue(q), asynq.TaskID(fmt.Sprintf("%s-%d", q, i)))
			try("enqueue on "+q, err)
		}
	}
	for i := range 30 {
		_, err := limiter.Allow(ctx, fmt.Sprintf("key-%d", i))
		try("rate limit", err)
	}
	t.Logf("through one node of the cluster: %d calls worked, %d failed with MOVED", ok, moved)
	if len(other) > 0 {
		t.Errorf("errors other than MOVED: %v", other)
	}
	if moved == 0 {
		t.Error("no call failed with MOVED: one node answered for every key, which would make the cluster usable through it")
	}
}
