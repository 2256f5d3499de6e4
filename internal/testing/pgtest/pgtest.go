// Package pgtest gives tests a throwaway PostgreSQL database.
//
// A test package that uses it starts one server per test binary and stops
// it when the tests are done:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
//
// and each test asks for its own empty database with NewDatabase, which is
// dropped when the test ends, or for a store on a fresh, migrated database
// with NewStore (the server's clock) or NewStoreClock (an injected one).
//
// The server is, in order of preference:
//
//   - the one at PAYRECON_TEST_DATABASE_URL, when that is set (a
//     postgres:// URL of a role allowed to CREATE DATABASE; its database is
//     used only to create and drop the test databases);
//   - a private cluster, created with initdb in a temporary directory (in
//     /dev/shm when there is one) the first time a test needs it and
//     started on a free loopback port with durability off (fsync,
//     synchronous_commit, full_page_writes). The
//     binaries are looked up on PATH, then in /usr/lib/postgresql/*/bin,
//     highest version first. PostgreSQL refuses to run as root, so when
//     the tests run as root the cluster is created and run as the user
//     "nobody" (the temporary directory is chowned to it).
//
// When neither is available the test is skipped, or fails when the
// environment variable CI is non-empty, so that CI cannot pass by skipping.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payrecon/payrecon/reconcile/postgres"
)

// EnvURL names the environment variable that points the tests at an
// existing server instead of a private cluster.
const EnvURL = "PAYRECON_TEST_DATABASE_URL"

// runAsUser is the account the private cluster runs as when the tests run
// as root.
const runAsUser = "nobody"

// startTimeout bounds initdb plus server start-up.
const startTimeout = 60 * time.Second

// errNoPostgres means no server URL is configured and no PostgreSQL
// binaries were found: the tests skip (or fail under CI).
var errNoPostgres = errors.New("no PostgreSQL server binaries (initdb, postgres) found on PATH or in /usr/lib/postgresql/*/bin")

var (
	mu      sync.Mutex
	started bool
	srv     *server
	srvErr  error
	dbSeq   atomic.Int64
)

// server is the PostgreSQL server the test databases live on.
type server struct {
	baseURL *url.URL      // URL of the maintenance database
	admin   *pgxpool.Pool // connections to it, for CREATE/DROP DATABASE
	stop    func() error  // stops a private cluster; nil for an external server
}

// Run runs the tests of m and then stops the private cluster, if one was
// started. It returns m.Run's exit code, for os.Exit in TestMain.
func Run(m *testing.M) int {
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// shutdown stops the private cluster and closes the admin connections.
func shutdown() error {
	mu.Lock()
	defer mu.Unlock()
	if srv == nil {
		return nil
	}
	s := srv
	srv, srvErr = nil, errors.New("pgtest: server already shut down")
	s.admin.Close()
	if s.stop != nil {
		return s.stop()
	}
	return nil
}

// getServer returns the shared server, starting it on first use. It skips
// tb when no PostgreSQL is available (fails it when CI is set).
func getServer(tb testing.TB) *server {
	tb.Helper()
	mu.Lock()
	if !started {
		started = true
		srv, srvErr = startServer()
	}
	s, err := srv, srvErr
	mu.Unlock()
	if err != nil {
		unavailable(tb, err)
	}
	return s
}

// unavailable ends tb because the server could not be had: a skip when
// PostgreSQL is simply not installed (a failure when CI is set), a
// failure otherwise.
func unavailable(tb testing.TB, err error) {
	tb.Helper()
	switch {
	case errors.Is(err, errNoPostgres) && os.Getenv("CI") != "":
		tb.Fatalf("pgtest: %v; CI is set, so this is a failure, not a skip: install PostgreSQL server binaries or set %s", err, EnvURL)
	case errors.Is(err, errNoPostgres):
		tb.Skipf("pgtest: skipping: %v; install PostgreSQL server binaries or set %s", err, EnvURL)
	default:
		tb.Fatalf("pgtest: %v", err)
	}
}

// NewDatabase creates an empty database, unique to this test, on the
// shared server and returns its postgres:// URL. The database is dropped
// (WITH (FORCE), closing any connection left open) when the test and its
// subtests end.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	s := getServer(tb)
	name := databaseName(tb.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The default strategy (WAL_LOG on PostgreSQL 15+) is faster here
	// than FILE_COPY, whose two checkpoints cost ~300ms even with fsync
	// off.
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u := *s.baseURL
	u.Path = "/" + name
	return u.String()
}

var nonIdent = regexp.MustCompile(`[^a-z0-9]+`)

// databaseName derives a unique, valid database name from a test name.
func databaseName(testName string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("pgtest: crypto/rand failed: " + err.Error())
	}
	slug := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	if len(slug) > 32 {
		slug = slug[len(slug)-32:]
	}
	return fmt.Sprintf("t_%s_%d_%s", slug, dbSeq.Add(1), hex.EncodeToString(b[:]))
}

// startServer connects to the server at EnvURL, or starts a private one.
func startServer() (*server, error) {
	if raw := os.Getenv(EnvURL); raw != "" {
		u, err := parseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvURL, err)
		}
		admin, err := connectAdmin(u)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvURL, err)
		}
		return &server{baseURL: u, admin: admin}, nil
	}
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	return startCluster(bin)
}

func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("must be a postgres:// URL")
	}
	return u, nil
}

func connectAdmin(u *url.URL) (*pgxpool.Pool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", u.Redacted(), err)
	}
	return pool, nil
}

// binGlob matches the directories of Debian's and Ubuntu's PostgreSQL
// packages.
var binGlob = "/usr/lib/postgresql/*/bin"

// findBinaries returns the directory holding initdb and postgres: the
// one of initdb on PATH, else the highest /usr/lib/postgresql/N/bin.
func findBinaries() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); has(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob(binGlob)
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	return "", errNoPostgres
}

// startCluster creates a cluster in a new temporary directory and starts
// it. On failure it removes everything it made.
func startCluster(bin string) (_ *server, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	dir, err := makeTempDir()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cred, err := credential(dir)
	if err != nil {
		return nil, err
	}

	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-A", "trust", "-U", "postgres", "--no-sync",
		"-E", "UTF8", "--no-locale")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb (as %s): %w\n%s", who(cred), err, out)
	}

	// A free port can be taken between probing and binding: try again.
	for attempt := 1; ; attempt++ {
		s, err := startPostgres(ctx, bin, dir, data, cred)
		if err == nil || attempt == 3 || !errors.Is(err, errPortTaken) {
			return s, err
		}
	}
}

// makeTempDir makes the cluster's directory: in /dev/shm when it can (a
// memory file system makes CREATE DATABASE about ten times faster than a
// disk), else in the default temporary directory.
func makeTempDir() (string, error) {
	if dir, err := os.MkdirTemp("/dev/shm", "payrecon-pgtest-"); err == nil {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "payrecon-pgtest-")
	if err != nil {
		return "", fmt.Errorf("temporary directory: %w", err)
	}
	return dir, nil
}

// credential returns the credential to run PostgreSQL with: nil when not
// root, otherwise runAsUser's, after chowning dir to it.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(runAsUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to: look up user %q to run it as: %w", runAsUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user %q: %w", runAsUser, err)
	}
	if err := os.Chown(dir, int(uid), int(gid)); err != nil {
		return nil, fmt.Errorf("chown %s to %s: %w", dir, runAsUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func who(cred *syscall.Credential) string {
	if cred == nil {
		return "the current user"
	}
	return runAsUser
}

var errPortTaken = errors.New("port taken")

// startPostgres runs the postmaster in the foreground as a child of this
// process and waits until it accepts connections.
func startPostgres(ctx context.Context, bin, dir, data string, cred *syscall.Credential) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", data,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+dir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "lc_messages=C",
	)
	cmd.Dir = dir
	watch := &logWatcher{ready: make(chan struct{})}
	cmd.Stdout = watch
	cmd.Stderr = watch
	// If this test binary dies without stopping the server, the kernel
	// kills it. The signal follows the thread that started the child, so
	// that thread stays locked to a goroutine that lives as long as the
	// server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}

	startErr := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		exited <- cmd.Wait()
	}()
	if err := <-startErr; err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}

	select {
	case <-watch.ready:
	case err := <-exited:
		tail := watch.tail()
		if strings.Contains(tail, "could not bind") || strings.Contains(tail, "could not create any TCP/IP sockets") {
			return nil, fmt.Errorf("%w: %d", errPortTaken, port)
		}
		return nil, fmt.Errorf("postgres exited before accepting connections (%v):\n%s", err, tail)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("postgres did not accept connections within %s:\n%s", startTimeout, watch.tail())
	}

	stop := func() error {
		defer os.RemoveAll(dir)
		// SIGINT is PostgreSQL's fast shutdown: abort sessions, exit.
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			return fmt.Errorf("stop postgres: %w", err)
		}
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("postgres did not stop within 30s; killed it")
		}
	}

	u := &url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	admin, err := connectAdmin(u)
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	return &server{baseURL: u, admin: admin, stop: stop}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logWatcher receives the server's log, keeps its last lines for error
// messages, and closes ready when the server accepts connections.
type logWatcher struct {
	ready chan struct{}

	mu      sync.Mutex
	partial []byte
	lines   []string
	isReady bool
}

const keepLines = 50

func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		w.lines = append(w.lines, line)
		if len(w.lines) > keepLines {
			w.lines = w.lines[len(w.lines)-keepLines:]
		}
		if !w.isReady && strings.Contains(line, "database system is ready to accept connections") {
			w.isReady = true
			close(w.ready)
		}
	}
	return len(p), nil
}

func (w *logWatcher) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(append(w.lines, string(w.partial)), "\n")
}

// NewStore returns a store over a fresh, migrated database of its own,
// closed when the test ends, with the server's clock (postgres.Config.Now
// nil). Like NewDatabase, it skips (or, under CI, fails) when no
// PostgreSQL is available.
func NewStore(tb testing.TB) *postgres.Store {
	tb.Helper()
	return NewStoreClock(tb, nil)
}

// NewStoreClock is NewStore with now injected as the store's clock
// (postgres.Config.Now; nil for the server's).
func NewStoreClock(tb testing.TB, now func() time.Time) *postgres.Store {
	tb.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: NewDatabase(tb), Now: now})
	if err != nil {
		tb.Fatalf("pgtest: open store: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		tb.Fatalf("pgtest: migrate: %v", err)
	}
	return st
}
