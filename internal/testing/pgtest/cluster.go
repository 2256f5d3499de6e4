package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Cluster is a private PostgreSQL cluster of one test, started with
// pg_ctl so that the test can restart it as an operator would (Restart),
// unlike the shared server, which runs as a child of the test binary. It
// listens on loopback only, with fsync off but synchronous_commit on, so
// that an immediate restart keeps every commit a client was told of, and
// runs as "nobody" when the tests run as root. It always needs the local
// server binaries (initdb, postgres, pg_ctl): PAYRECON_TEST_DATABASE_URL
// cannot stand in for it.
type Cluster struct {
	bin, dir, data string
	cred           *syscall.Credential
	port           int
}

// NewCluster creates and starts a cluster of its own for tb, stopped and
// removed when tb ends. It skips tb when no PostgreSQL server binaries
// are installed (fails it when CI is set), as NewDatabase does.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin, err := findBinaries()
	if err == nil {
		if _, statErr := os.Stat(filepath.Join(bin, "pg_ctl")); statErr != nil {
			err = fmt.Errorf("%w (pg_ctl missing beside initdb in %s)", errNoPostgres, bin)
		}
	}
	if err != nil {
		unavailable(tb, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	dir, err := makeTempDir()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	c := &Cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	tb.Cleanup(func() {
		if err := c.stop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
		os.RemoveAll(dir)
	})
	if c.cred, err = credential(dir); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if out, err := c.command(ctx, "initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "--no-sync",
		"-E", "UTF8", "--no-locale").CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: initdb (as %s): %v\n%s", who(c.cred), err, out)
	}
	for attempt := 1; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		// synchronous_commit stays on: an immediate restart loses the
		// commits whose WAL was not yet written, which would be a lost
		// commit the client was told of. fsync off is safe here: the
		// operating system does not crash, only the server.
		opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off "+
			"-c max_connections=200 -c lc_messages=C", c.port, dir)
		out, err := c.command(ctx, "pg_ctl", "start", "-D", c.data, "-w", "-t", "60", "-l", filepath.Join(dir, "log"), "-o", opts).CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 3 {
			tb.Fatalf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, c.LogTail())
		}
	}
	return c
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	return cmd
}

// URL returns the postgres:// URL of database name on the cluster
// ("postgres" is the maintenance database).
func (c *Cluster) URL(name string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path: "/" + name, RawQuery: "sslmode=disable"}
	return u.String()
}

// NewDatabase creates an empty database on the cluster and returns its
// URL. It is removed with the cluster.
func (c *Cluster) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := databaseName(tb.Name())
	u, err := parseURL(c.URL("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	admin, err := connectAdmin(u)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return c.URL(name)
}

// RestartImmediate restarts the cluster with `pg_ctl restart -m
// immediate`: every backend is killed without a checkpoint, as in a
// crash, and the server recovers from its WAL on the way up. It returns
// once the server accepts connections again.
func (c *Cluster) RestartImmediate(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if out, err := c.command(ctx, "pg_ctl", "restart", "-D", c.data, "-m", "immediate", "-w", "-t", "60",
		"-l", filepath.Join(c.dir, "log")).CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: pg_ctl restart -m immediate: %v\n%s\n%s", err, out, c.LogTail())
	}
}

// LogTail returns the end of the cluster's log.
func (c *Cluster) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop stops the cluster (fast shutdown), if it runs.
func (c *Cluster) stop() error {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.data, "-m", "fast", "-w").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}
