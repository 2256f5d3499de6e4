package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The compose file.

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	// The extension fields (x-…), which hold the YAML anchors.
	Extensions map[string]any `yaml:",inline"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command         any      `yaml:"command"`
	Entrypoint      any      `yaml:"entrypoint"`
	Environment     any      `yaml:"environment"`
	DependsOn       any      `yaml:"depends_on"`
	Ports           []string `yaml:"ports"`
	Volumes         []string `yaml:"volumes"`
	Healthcheck     any      `yaml:"healthcheck"`
	Restart         string   `yaml:"restart"`
	StopSignal      string   `yaml:"stop_signal"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	Deploy          struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
}

// loadCompose decodes compose.yaml, refusing keys this test does not
// know, so that a misspelt depends_on cannot pass unread (add a new key to
// composeService).
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAML(t, "compose.yaml", &c, true)
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("compose.yaml: unknown top-level key %s", k)
		}
	}
	return c
}

// command returns a service's command, which must be in list form.
func (s composeService) command(t *testing.T, name string) []string {
	t.Helper()
	switch c := s.Command.(type) {
	case nil:
		return nil
	case []any:
		out := make([]string, len(c))
		for i, a := range c {
			s, ok := a.(string)
			if !ok {
				t.Errorf("%s: command item %v is not a string", name, a)
			}
			out[i] = s
		}
		return out
	default:
		t.Errorf("%s: command %q: use the list form, which is what the container runs", name, c)
		return nil
	}
}

// env returns a service's environment, from either form.
func (s composeService) env(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			if v == nil {
				out[k] = ""
			} else {
				out[k] = fmt.Sprint(v)
			}
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			out[k] = v
		}
	default:
		t.Errorf("%s: environment %T", name, e)
	}
	return out
}

// dependsOn returns a service's dependencies and their conditions.
func (s composeService) dependsOn(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch d := s.DependsOn.(type) {
	case nil:
	case []any:
		for _, dep := range d {
			out[fmt.Sprint(dep)] = "service_started"
		}
	case map[string]any:
		for dep, v := range d {
			cond := "service_started"
			if m, ok := v.(map[string]any); ok && m["condition"] != nil {
				cond = fmt.Sprint(m["condition"])
			}
			out[dep] = cond
		}
	default:
		t.Errorf("%s: depends_on %T", name, d)
	}
	return out
}

// mounts returns a service's bind mounts and volumes: target → source.
func (s composeService) mounts() map[string]string {
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			out[parts[1]] = parts[0]
		}
	}
	return out
}

var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}`)

// expand replaces compose's ${VAR…} by a placeholder (or the default of
// ${VAR:-default}), for parsing URLs and addresses.
func expand(s string) string {
	return interpolation.ReplaceAllStringFunc(s, func(m string) string {
		p := interpolation.FindStringSubmatch(m)
		if strings.HasSuffix(p[2], "-") {
			return p[3]
		}
		return "placeholder"
	})
}

// listenPort returns the port of an address such as 0.0.0.0:8080, and
// whether it listens on every interface.
func listenPort(t *testing.T, where, addr string) (port string, everywhere bool) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: address %q: %v", where, addr, err)
		return "", false
	}
	return port, host == "" || host == "0.0.0.0" || host == "::"
}

// payreconService is one compose service that runs payrecon.
type payreconService struct {
	name    string
	command string
	flags   map[string]string
	env     map[string]string
	port    string // the port it listens on
}

// TestCompose checks compose.yaml without Docker: every payrecon service
// runs a real command with real flags and variables, and the services,
// ports, URLs, mounts and secrets fit together.
func TestCompose(t *testing.T) {
	c := loadCompose(t)
	cl := cli(t)
	for _, want := range []string{"postgres", "migrate", "serve", "worker", "fakeprovider", "prometheus", "grafana"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("compose.yaml has no service %s", want)
		}
	}

	// The payrecon services: built from deploy/Dockerfile, run as the
	// image's entrypoint (payrecon) with their command.
	pr := map[string]*payreconService{}
	for name, s := range c.Services {
		if s.Image != payreconImage && s.Build == nil {
			continue
		}
		if s.Image != payreconImage || s.Build == nil || s.Build.Context != ".." || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("%s: image %q build %+v: want %s built from .. with deploy/Dockerfile", name, s.Image, s.Build, payreconImage)
		}
		if s.Entrypoint != nil {
			t.Errorf("%s: overrides the entrypoint", name)
		}
		args := s.command(t, name)
		env := s.env(t, name)
		p := &payreconService{name: name, env: env, flags: cl.checkArgs(t, "compose.yaml: "+name, args)}
		if len(args) > 0 {
			p.command = args[0]
		}
		cl.checkEnv(t, "compose.yaml: "+name, env)
		addr := env["PAYRECON_ADDR"]
		if a, ok := p.flags["addr"]; ok {
			addr = a
		}
		if p.command != "migrate" {
			port, everywhere := listenPort(t, name, addr)
			if !everywhere {
				t.Errorf("%s: listens on %q: in a container it must listen on every interface (0.0.0.0:PORT)", name, addr)
			}
			p.port = port
		}
		for _, hp := range s.Ports {
			parts := strings.Split(hp, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" || parts[2] != p.port {
				t.Errorf("%s: port %q: publish 127.0.0.1:HOST:%s only", name, hp, p.port)
			}
		}
		pr[name] = p
	}
	if strings.Join(keys(pr), ",") != "fakeprovider,migrate,serve,worker" {
		t.Errorf("payrecon services %v, want fakeprovider, migrate, serve, worker", keys(pr))
	}
	// Each payrecon service runs the command it is named after.
	for name, p := range pr {
		if p.command != name {
			t.Errorf("service %s runs payrecon %q, want payrecon %s", name, p.command, name)
		}
	}
	serve, worker, fake, migrate := pr["serve"], pr["worker"], pr["fakeprovider"], pr["migrate"]
	if serve == nil || worker == nil || fake == nil || migrate == nil {
		t.FailNow()
	}

	// Order: Postgres healthy, then migrate once, then serve and worker.
	pg := c.Services["postgres"]
	if pg.Healthcheck == nil {
		t.Error("postgres: no healthcheck, so nothing can wait for it")
	}
	if cond := c.Services["migrate"].dependsOn(t, "migrate")["postgres"]; cond != "service_healthy" {
		t.Errorf("migrate: depends on postgres with %q, want service_healthy", cond)
	}
	if r := c.Services["migrate"].Restart; r != "no" {
		t.Errorf("migrate: restart %q: a one-shot must not restart", r)
	}
	for _, p := range []*payreconService{serve, worker} {
		if cond := c.Services[p.name].dependsOn(t, p.name)["migrate"]; cond != "service_completed_successfully" {
			t.Errorf("%s: depends on migrate with %q, want service_completed_successfully", p.name, cond)
		}
	}

	// The database: every payrecon service but the fake uses the Postgres
	// service, as its user, on its database.
	pgEnv := pg.env(t, "postgres")
	for _, p := range []*payreconService{migrate, serve, worker} {
		u, err := url.Parse(expand(p.env["PAYRECON_DATABASE_URL"]))
		if err != nil || u.Scheme != "postgres" {
			t.Errorf("%s: PAYRECON_DATABASE_URL %q (%v)", p.name, p.env["PAYRECON_DATABASE_URL"], err)
			continue
		}
		pw, _ := u.User.Password()
		if u.Hostname() != "postgres" || u.Port() != "5432" || u.User.Username() != pgEnv["POSTGRES_USER"] ||
			strings.TrimPrefix(u.Path, "/") != pgEnv["POSTGRES_DB"] || pw != expand(pgEnv["POSTGRES_PASSWORD"]) ||
			!strings.Contains(p.env["PAYRECON_DATABASE_URL"], pgEnv["POSTGRES_PASSWORD"]) {
			t.Errorf("%s: PAYRECON_DATABASE_URL %q does not match the postgres service (%v)", p.name, p.env["PAYRECON_DATABASE_URL"], pgEnv)
		}
	}

	// The provider: serve and worker use payrecon's Stripe adapter against
	// the fake, which sends its webhooks to serve, signed with the secret
	// serve verifies.
	fakeBase := "http://fakeprovider:" + fake.port
	for _, p := range []*payreconService{serve, worker} {
		if p.env["PAYRECON_PROVIDER"] != "stripe" || p.env["PAYRECON_STRIPE_API_BASE"] != fakeBase ||
			!strings.HasPrefix(p.env["STRIPE_SECRET_KEY"], "sk_test_") {
			t.Errorf("%s: provider %q at %q with key %q, want stripe at %s with an sk_test_ key",
				p.name, p.env["PAYRECON_PROVIDER"], p.env["PAYRECON_STRIPE_API_BASE"], p.env["STRIPE_SECRET_KEY"], fakeBase)
		}
	}
	if want := "http://serve:" + serve.port + "/webhooks/stripe"; fake.flags["webhook-url"] != want {
		t.Errorf("fakeprovider: --webhook-url %q, want %s", fake.flags["webhook-url"], want)
	}
	if s := serve.env["STRIPE_WEBHOOK_SECRET"]; s == "" || s != fake.env["STRIPE_WEBHOOK_SECRET"] {
		t.Errorf("STRIPE_WEBHOOK_SECRET: serve %q, fakeprovider %q: want the same secret", s, fake.env["STRIPE_WEBHOOK_SECRET"])
	}
	if serve.env["PAYRECON_API_TOKEN"] == "" {
		t.Error("serve: no PAYRECON_API_TOKEN: it refuses to start the purchase API without one")
	}

	// Secrets come from deploy/.env, never from this file (the fake's
	// sk_test_ key is no secret: the fake takes any).
	secretName := regexp.MustCompile(`TOKEN|SECRET|PASSWORD`)
	for name, s := range c.Services {
		for k, v := range s.env(t, name) {
			fakeKey := k == "STRIPE_SECRET_KEY" && strings.HasPrefix(v, "sk_test_")
			if secretName.MatchString(k) && !fakeKey && !strings.Contains(v, "${") {
				t.Errorf("%s: %s is written in compose.yaml; take it from deploy/.env (${%s:?…})", name, k, k)
			}
		}
	}

	// SIGTERM: compose waits stop_grace_period (10s by default) before
	// SIGKILL; payrecon needs its shutdown grace plus the HTTP drain.
	for _, p := range []*payreconService{serve, worker} {
		grace := cl.grace
		if g, ok := p.env["PAYRECON_SHUTDOWN_GRACE"]; ok {
			grace, _ = time.ParseDuration(g)
		}
		s := c.Services[p.name]
		d, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil || d < grace+30*time.Second {
			t.Errorf("%s: stop_grace_period %q: want at least the shutdown grace (%s) plus 30s", p.name, s.StopGracePeriod, grace)
		}
		if s.StopSignal != "" && s.StopSignal != "SIGTERM" {
			t.Errorf("%s: stop_signal %s", p.name, s.StopSignal)
		}
	}

	// Every published port of every service is on loopback.
	for name, s := range c.Services {
		for _, hp := range s.Ports {
			if !strings.HasPrefix(hp, "127.0.0.1:") {
				t.Errorf("%s: port %q is published on every interface; use 127.0.0.1:", name, hp)
			}
		}
		for target, src := range s.mounts() {
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s: mount %s → %s: %v", name, src, target, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s: volume %s is not declared", name, src)
			}
		}
	}

	// Every variable compose.yaml interpolates is listed in .env.example,
	// and every one listed there is used.
	example := envFile(t, ".env.example")
	used := map[string]bool{}
	for _, m := range interpolation.FindAllStringSubmatch(string(readFile(t, "compose.yaml")), -1) {
		used[m[1]] = true
		if _, ok := example[m[1]]; !ok && m[2] != "-" && m[2] != ":-" {
			t.Errorf("compose.yaml needs ${%s}, which .env.example does not list", m[1])
		}
	}
	for k := range example {
		if !used[k] {
			t.Errorf(".env.example lists %s, which compose.yaml does not use", k)
		}
	}
	cl.checkEnv(t, ".env.example", example)
}

// envFile reads KEY=VALUE lines.
func envFile(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, name)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: %q is not KEY=VALUE", name, line)
		}
		out[k] = v
	}
	return out
}

// ---------------------------------------------------------------------
// Prometheus and Grafana in the stack.

type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheusConfig: the sample scrape config is valid (promtool, which
// also checks the rules it loads), names its job payrecon as the runbook
// says, and scrapes every payrecon process of the compose stack.
func TestPrometheusConfig(t *testing.T) {
	var cfg prometheusConfig
	decodeYAML(t, "prometheus/prometheus.yml", &cfg, false)
	c := loadCompose(t)

	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Errorf("rule_files %v: want alerts.yml, beside the config", cfg.RuleFiles)
	}
	// Compose mounts the config and every rule file side by side.
	mounts := c.Services["prometheus"].mounts()
	if mounts["/etc/prometheus/prometheus.yml"] != "./prometheus/prometheus.yml" {
		t.Errorf("prometheus: mounts %v: want ./prometheus/prometheus.yml at /etc/prometheus/prometheus.yml", mounts)
	}
	for _, rf := range cfg.RuleFiles {
		if src, ok := mounts[path.Join("/etc/prometheus", rf)]; !ok || filepath.Clean(src) != filepath.Join("prometheus", rf) {
			t.Errorf("prometheus: rule file %s is not mounted from ./prometheus/%s", rf, rf)
		}
	}

	// The scrape job: named payrecon; its targets are exactly the
	// long-running payrecon services but the fake, on their ports.
	want := map[string]bool{}
	for name, s := range c.Services {
		args := s.command(t, name)
		if s.Image == payreconImage && len(args) > 0 && (args[0] == "serve" || args[0] == "worker") {
			env := s.env(t, name)
			port, _ := listenPort(t, name, env["PAYRECON_ADDR"])
			want[name+":"+port] = true
		}
	}
	got := map[string]bool{}
	jobs := 0
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != scrapeJobName {
			continue
		}
		jobs++
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %q", sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				got[tg] = true
			}
		}
		for _, d := range sc.DNSSDConfigs {
			if d.Type != "A" {
				t.Errorf("dns_sd_configs type %q: compose's DNS answers A records", d.Type)
			}
			for _, n := range d.Names {
				got[n+":"+strconv.Itoa(d.Port)] = true
			}
		}
	}
	if jobs != 1 {
		t.Errorf("%d scrape jobs named %s, want 1 (docs/runbook.md and docs/deploy.md name it)", jobs, scrapeJobName)
	}
	if strings.Join(keys(got), " ") != strings.Join(keys(want), " ") {
		t.Errorf("job %s scrapes %v, want the payrecon serve and worker services %v", scrapeJobName, keys(got), keys(want))
	}
	if _, err := time.ParseDuration(cfg.Global.ScrapeInterval); err != nil {
		t.Errorf("scrape_interval %q", cfg.Global.ScrapeInterval)
	}

	promtool := requireTool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "check", "config", "prometheus/prometheus.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string `yaml:"name"`
		UID       string `yaml:"uid"`
		Type      string `yaml:"type"`
		Access    string `yaml:"access"`
		URL       string `yaml:"url"`
		IsDefault bool   `yaml:"isDefault"`
		Editable  bool   `yaml:"editable"`
		JSONData  struct {
			TimeInterval string `yaml:"timeInterval"`
		} `yaml:"jsonData"`
	} `yaml:"datasources"`
}

type grafanaDashboards struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name                  string `yaml:"name"`
		Folder                string `yaml:"folder"`
		Type                  string `yaml:"type"`
		DisableDeletion       bool   `yaml:"disableDeletion"`
		AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
		UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
		Options               struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// TestGrafanaProvisioning: Grafana in the stack finds the Prometheus
// service and the dashboard where compose mounts them.
func TestGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	g := c.Services["grafana"]
	mounts := g.mounts()
	if mounts["/etc/grafana/provisioning"] != "./grafana/provisioning" {
		t.Errorf("grafana: mounts %v: want ./grafana/provisioning at /etc/grafana/provisioning", mounts)
	}

	var ds grafanaDatasources
	decodeYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &ds, true)
	var prom prometheusConfig
	decodeYAML(t, "prometheus/prometheus.yml", &prom, false)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasources: %+v", ds)
	}
	d := ds.Datasources[0]
	u, err := url.Parse(d.URL)
	if err != nil || d.Type != "prometheus" || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("datasource %+v: want type prometheus at http://prometheus:9090", d)
	}
	if _, ok := c.Services[u.Hostname()]; !ok {
		t.Errorf("datasource URL %s: no such compose service", d.URL)
	}
	if d.JSONData.TimeInterval != prom.Global.ScrapeInterval {
		t.Errorf("datasource timeInterval %q, Prometheus scrape_interval %q: keep them equal ($__rate_interval)", d.JSONData.TimeInterval, prom.Global.ScrapeInterval)
	}

	var dash grafanaDashboards
	decodeYAML(t, "grafana/provisioning/dashboards/payrecon.yaml", &dash, true)
	if dash.APIVersion != 1 || len(dash.Providers) != 1 || dash.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers: %+v", dash)
	}
	p := dash.Providers[0].Options.Path
	if src := mounts[p]; filepath.Clean(src) != filepath.Dir(dashboardPath) {
		t.Errorf("dashboard provider path %s: compose mounts %q there, want ./%s", p, src, filepath.Dir(dashboardPath))
	}
	home := g.env(t, "grafana")["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if home != path.Join(p, filepath.Base(dashboardPath)) {
		t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %q, want %s", home, path.Join(p, filepath.Base(dashboardPath)))
	}
}
