package crashtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
)

// Secrets of the test's processes: test values, never real ones.
const (
	apiToken      = "crash:crashtest-api-token-0123456789"
	bearer        = "crashtest-api-token-0123456789"
	stripeKey     = "sk_test_crashtest"
	webhookSecret = "whsec_crashtest"
)

// journal is a run's observation journal: what the test drove, what the
// processes did, what the fake's ledger saw, the transitions. A failing
// run prints it, so that the failure explains itself.
type journal struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func newJournal() *journal { return &journal{start: time.Now()} }

// add records one line under kind (drive, exit, start, ledger, …).
func (j *journal) add(kind, format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf("%8.3fs %-8s %s", time.Since(j.start).Seconds(), kind, fmt.Sprintf(format, args...)))
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines, "\n")
}

// proc is one payrecon process the test started.
type proc struct {
	name string // "serve#2"
	cmd  *exec.Cmd
	log  string // its stderr and stdout
	done chan struct{}
	err  error // Wait's, once done is closed
}

// killedBySIGKILL reports whether the process ended by SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	select {
	case <-p.done:
	default:
		return false
	}
	st, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && st.Signaled() && st.Signal() == syscall.SIGKILL
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitString says how the process ended.
func (p *proc) exitString() string {
	st, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return fmt.Sprint(p.err)
	case st.Signaled():
		if st.Signal() == syscall.SIGKILL {
			return "killed by SIGKILL"
		}
		return "killed by signal " + st.Signal().String()
	default:
		return "exited with status " + strconv.Itoa(st.ExitStatus())
	}
}

// env is the world of one run: a database, the fake provider and the
// payrecon processes around it.
type env struct {
	t       *testing.T
	bin     string
	dir     string
	j       *journal
	dbURL   string
	sqlite  bool
	client  *http.Client
	mu      sync.Mutex
	procs   []*proc
	seq     map[string]int
	fake    string // the fake's base URL
	serve   string // serve's base URL
	fakeP   *proc
	fakeArg []string
}

func newEnv(t *testing.T, dbURL string) *env {
	t.Helper()
	e := &env{t: t, bin: binary(t), dir: t.TempDir(), j: newJournal(), dbURL: dbURL,
		sqlite: strings.HasPrefix(dbURL, "sqlite:"), seq: map[string]int{},
		client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(func() {
		e.stopAll()
		if t.Failed() || *keepJournal {
			t.Logf("observation journal:\n%s\n%s", e.j, e.logTails())
		}
	})
	return e
}

// freeAddr returns a loopback address nobody listens on now, on a port
// below the kernel's ephemeral range. A process restarted after a crash
// must find its address free again, and a port of the ephemeral range
// (what port 0 gives) may meanwhile become the local end of any outgoing
// connection on the machine, such as another test's to its database:
// serve then failed to bind ("address already in use") in CI.
func freeAddr(t *testing.T) string {
	t.Helper()
	const lowest = 10000
	if top := ephemeralStart(); top > lowest+1000 {
		for range 100 {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lowest+rand.IntN(top-lowest)))
			if err != nil {
				continue // taken: try another
			}
			defer l.Close()
			return l.Addr().String()
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ephemeralStart is the first port of the kernel's range for the local
// ends of outgoing connections (Linux's ip_local_port_range), or 0 when
// it cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// start starts `payrecon args…` with extra environment, naming it by its
// command and a sequence number.
func (e *env) start(command string, extraEnv []string, args ...string) *proc {
	e.t.Helper()
	e.mu.Lock()
	e.seq[command]++
	name := fmt.Sprintf("%s#%d", command, e.seq[command])
	e.mu.Unlock()
	logPath := filepath.Join(e.dir, strings.ReplaceAll(name, "#", "-")+".log")
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(e.bin, append([]string{command}, args...)...)
	cmd.Env = append(os.Environ(),
		"STRIPE_SECRET_KEY="+stripeKey, "STRIPE_WEBHOOK_SECRET="+webhookSecret, "PAYRECON_API_TOKEN="+apiToken,
		"PAYRECON_DATABASE_URL="+e.dbURL, "PAYRECON_LOG_LEVEL=info", "PAYRECON_CRASHPOINT=")
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	// A test binary that dies takes its processes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		e.j.add("exit", "%s (pid %d) %s", p.name, cmd.Process.Pid, p.exitString())
		close(p.done)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	armed := ""
	for _, kv := range extraEnv {
		if v, ok := strings.CutPrefix(kv, "PAYRECON_CRASHPOINT="); ok && v != "" {
			armed = " armed at " + v
		}
	}
	e.j.add("start", "%s (pid %d)%s: %s", name, cmd.Process.Pid, armed, strings.Join(args, " "))
	return p
}

// kill sends SIGKILL to p and waits for it to end.
func (e *env) kill(p *proc) {
	e.t.Helper()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop ends p with SIGTERM (SIGKILL after 20 s).
func (e *env) stop(p *proc) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (e *env) stopAll() {
	e.mu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.mu.Unlock()
	// The payrecon processes first, the fake last: a drain may still ask it.
	for _, p := range procs {
		if p != e.fakeP {
			e.stop(p)
		}
	}
	if e.fakeP != nil {
		e.stop(e.fakeP)
	}
}

// logTails returns the last lines of every process's log.
func (e *env) logTails() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, p := range e.procs {
		data, _ := os.ReadFile(p.log)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "--- log of %s (last %d lines)\n%s\n", p.name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// await polls cond until it holds or the deadline passes: the processes
// are real, so there is nothing to wait on but what they show.
func (e *env) await(what string, within time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			e.j.add("timeout", "%s: not within %s", what, within)
			e.t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitHealthy waits until base answers GET path with 200, or p exits.
func (e *env) awaitHealthy(p *proc, base, path string) {
	e.t.Helper()
	e.await(p.name+" healthy", 60*time.Second, func() bool {
		if p.exited() {
			e.t.Fatalf("%s %s before it was healthy", p.name, p.exitString())
		}
		resp, err := e.client.Get(base + path)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// startFake starts `payrecon fakeprovider` with faults, sending webhooks
// to serve's address (chosen here, before serve starts) when webhooks.
func (e *env) startFake(faults string, webhooks bool, serveAddr string) {
	e.t.Helper()
	addr := freeAddr(e.t)
	e.fake = "http://" + addr
	e.fakeArg = []string{"--addr", addr, "--fake-faults", faults}
	if webhooks {
		e.fakeArg = append(e.fakeArg, "--webhook-url", "http://"+serveAddr+"/webhooks/stripe")
	}
	e.fakeP = e.start("fakeprovider", nil, e.fakeArg...)
	e.awaitHealthy(e.fakeP, e.fake, "/_fake/ledger")
}

// protocolFlags are serve's and worker's settings for a run that settles
// in seconds on the real clock. The provider's rate budget is off: its
// test-mode limit (25 calls a second for every process together) would
// make calls wait past these 2-second leases, and the budget has tests
// of its own; what these tests break is processes.
func (e *env) protocolFlags(extra ...string) []string {
	return append([]string{
		"--provider", "stripe", "--stripe-api-base", e.fake, "--budget=false",
		"--lease-duration", "2s", "--provider-timeout", "1s",
		"--backoff", "200ms,500ms,1s", "--poll-interval", "50ms",
		"--max-attempts", "20", "--max-uncertain-age", "1m", "--escalated-interval", "2s",
		"--sweep-rescue", "@every 1s", "--sweep-escalate", "@every 1s", "--sweep-unmatched", "@every 1s",
		"--shutdown-grace", "2s",
	}, extra...)
}

// getJSON GETs url into v; it returns the status code.
func (e *env) getJSON(url string, v any) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, fmt.Errorf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode, nil
}

// ledger reads the fake's ledger.
func (e *env) ledger() fakeprovider.Ledger {
	e.t.Helper()
	var l fakeprovider.Ledger
	if code, err := e.getJSON(e.fake+"/_fake/ledger", &l); err != nil || code != http.StatusOK {
		e.t.Fatalf("GET /_fake/ledger: %d %v", code, err)
	}
	return l
}

// webhooks reads the fake's webhook view.
func (e *env) webhooks() fakeprovider.WebhookView {
	e.t.Helper()
	var v fakeprovider.WebhookView
	if code, err := e.getJSON(e.fake+"/_fake/webhooks", &v); err != nil || code != http.StatusOK {
		e.t.Fatalf("GET /_fake/webhooks: %d %v", code, err)
	}
	return v
}

// apiCall is one request of the purchase API, as the test sent it, and
// its first answer (none when the connection broke).
type apiCall struct {
	path, key string
	body      []byte
	answered  bool
	status    int
	answer    []byte
	id        string // the purchase's or refund's id, once known
}

// post sends one API request; an error means no answer came.
func (e *env) post(path, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, e.serve+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, b, nil
}

// call sends an API request and records it, answered or not.
func (e *env) call(path, key string, body []byte) *apiCall {
	c := &apiCall{path: path, key: key, body: body}
	code, b, err := e.post(path, key, body)
	switch {
	case err != nil:
		e.j.add("drive", "POST %s key=%s: no answer (%v)", path, key, errors.Unwrap(err))
	default:
		c.answered, c.status, c.answer = true, code, b
		var v struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(b, &v)
		c.id = v.ID
		e.j.add("drive", "POST %s key=%s: %d %s", path, key, code, c.id)
	}
	return c
}
