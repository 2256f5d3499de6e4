package fakeprovider

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzFaultSpec feeds each spec to ParseConfig, ParseServerConfig and
// ParseSpec (the parsers of --fake-faults). Properties: none panics; a
// spec accepted parses to a config that validates (New and NewServer
// would not panic on it); and the config, written back as a spec
// (formatConfig, formatServerConfig), parses to the same config.
func FuzzFaultSpec(f *testing.F) {
	for _, seed := range []string{
		"",
		" ",
		"lost_reply=0.2,timeout=0.1,stale_processing=0.1,search_lag=30s,seed=7",
		"fail_before=0.1,timeout=0.1,lost_reply=0.1,processing=0.1,processing_decline=0.1,stale_processing=0.1,decline=0.4",
		"list_lag=2s,settle_after=1m,key_retention=24h,seed=-9223372036854775808",
		"decline=1,seed=0x10",
		"fail_before=0.7,timeout=0.2,lost_reply=0.1",
		"fail_before=0.7,timeout=0.2,lost_reply=0.2",
		"lost_reply=1.5",
		"lost_reply=NaN",
		"lost_reply=-0",
		"lost_reply=1e-400,timeout=0x1p-2",
		"search_lag=-1s",
		"settle_after=0",
		"key_retention=2562047h47m16.854775807s",
		"key_retention=2562047h47m16.854775808s",
		"seed=1,seed=2",
		"seed",
		"=1",
		"a=",
		",",
		"decline=0.5,",
		" decline = 0.5 , seed = 3 ",
		"webhook_drop=0.1,webhook_duplicate=0.2,webhook_reorder=0.1,webhook_delay=0.2,webhook_stale_processing=0.1",
		"webhook_attempts=3,webhook_backoff=1s,webhook_max_backoff=1m,webhook_tick=100ms",
		"webhook_attempts=0",
		"webhook_tick=0s",
		"webhook_unknown=1",
		"lost_reply=0.1,processing=0.2,seed=7,webhook_drop=0.1,webhook_duplicate=0.2",
		"refund_lost_reply=0.2,refund_timeout=0.1,refund_stale_processing=0.1,lost_reply=0.5",
		"refund_decline=0.6,refund_fail_before=0.5",
		"refund_=1",
		"webhook_drop=0.1,webhook_drop=0.1",
		"\u0085decline=0.5\u00a0",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		if len(spec) > 4096 {
			return
		}
		cfg, cerr := ParseConfig(spec)
		if cerr == nil {
			checkConfig(t, spec, cfg)
			again, err := ParseConfig(formatConfig(cfg))
			if err != nil || parsed(again) != parsed(cfg) {
				t.Fatalf("ParseConfig(%q) = %+v, written back %q parses to %+v, %v", spec, cfg, formatConfig(cfg), again, err)
			}
		}
		scfg, serr := ParseServerConfig(spec)
		if serr == nil {
			checkServerConfig(t, spec, scfg)
			again, err := ParseServerConfig(formatServerConfig(scfg))
			if err != nil || serverParsed(again) != serverParsed(scfg) {
				t.Fatalf("ParseServerConfig(%q) = %+v, written back %q parses to %+v, %v", spec, scfg, formatServerConfig(scfg), again, err)
			}
		}
		both, sboth, err := ParseSpec(spec)
		if err != nil {
			return
		}
		checkConfig(t, spec, both)
		checkServerConfig(t, spec, sboth)
		written := strings.Trim(formatConfig(both)+","+formatServerConfig(sboth), ",")
		again, sagain, err := ParseSpec(written)
		if err != nil || parsed(again) != parsed(both) || serverParsed(sagain) != serverParsed(sboth) {
			t.Fatalf("ParseSpec(%q) = %+v, %+v; written back %q parses to %+v, %+v, %v", spec, both, sboth, written, again, sagain, err)
		}
	})
}

// configFields are the fields of a Config that ParseConfig sets.
type configFields struct {
	faults, refundFaults                          Faults
	seed                                          int64
	searchLag, listLag, settleAfter, keyRetention time.Duration
}

func parsed(c Config) configFields {
	return configFields{c.Faults, c.RefundFaults, c.Seed, c.SearchLag, c.ListLag, c.SettleAfter, c.KeyRetention}
}

// serverFields are the fields of a ServerConfig that ParseServerConfig
// sets.
type serverFields struct {
	faults                    WebhookFaults
	attempts                  int
	backoff, maxBackoff, tick time.Duration
}

func serverParsed(c ServerConfig) serverFields {
	return serverFields{c.WebhookFaults, c.WebhookMaxAttempts, c.WebhookBackoff, c.WebhookMaxBackoff, c.TickEvery}
}

// checkConfig fails t unless cfg is a Config New accepts.
func checkConfig(t *testing.T, spec string, cfg Config) {
	t.Helper()
	if err := cfg.Faults.Validate(); err != nil {
		t.Fatalf("ParseConfig(%q) accepted faults that do not validate: %v", spec, err)
	}
	if err := cfg.RefundFaults.Validate(); err != nil {
		t.Fatalf("ParseConfig(%q) accepted refund faults that do not validate: %v", spec, err)
	}
	if cfg.KeyRetention < 0 || cfg.SettleAfter < 0 || cfg.SearchLag < 0 || cfg.ListLag < 0 {
		t.Fatalf("ParseConfig(%q) accepted a negative duration: %+v", spec, cfg)
	}
	cfg.Now = func() time.Time { return time.Unix(0, 0) }
	New(cfg) // panics on a config it refuses
}

// checkServerConfig fails t unless cfg is a ServerConfig NewServer
// accepts.
func checkServerConfig(t *testing.T, spec string, cfg ServerConfig) {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatalf("ParseServerConfig(%q) accepted a config that does not validate: %v", spec, err)
	}
	if cfg.WebhookMaxAttempts < 0 || cfg.WebhookBackoff < 0 || cfg.WebhookMaxBackoff < 0 || cfg.TickEvery < 0 {
		t.Fatalf("ParseServerConfig(%q) accepted a negative value: %+v", spec, cfg)
	}
}

// formatConfig writes the fields of cfg that ParseConfig sets as a spec,
// leaving out zero values (which parse to the same Config as none).
func formatConfig(cfg Config) string {
	var items []string
	for _, f := range drawOrder {
		if p := *cfg.Faults.prob(f); p != 0 {
			items = append(items, string(f)+"="+strconv.FormatFloat(p, 'g', -1, 64))
		}
		if p := *cfg.RefundFaults.prob(f); p != 0 {
			items = append(items, refundPrefix+string(f)+"="+strconv.FormatFloat(p, 'g', -1, 64))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"search_lag", cfg.SearchLag}, {"list_lag", cfg.ListLag}, {"settle_after", cfg.SettleAfter}, {"key_retention", cfg.KeyRetention}} {
		if d.v != 0 {
			items = append(items, d.name+"="+d.v.String())
		}
	}
	if cfg.Seed != 0 {
		items = append(items, "seed="+strconv.FormatInt(cfg.Seed, 10))
	}
	return strings.Join(items, ",")
}

// formatServerConfig writes the fields of cfg that ParseServerConfig sets
// as a spec, leaving out zero values.
func formatServerConfig(cfg ServerConfig) string {
	var items []string
	for _, f := range webhookFaultOrder {
		if p := *cfg.WebhookFaults.prob(f); p != 0 {
			items = append(items, string(f)+"="+strconv.FormatFloat(p, 'g', -1, 64))
		}
	}
	if cfg.WebhookMaxAttempts != 0 {
		items = append(items, "webhook_attempts="+strconv.Itoa(cfg.WebhookMaxAttempts))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"webhook_backoff", cfg.WebhookBackoff}, {"webhook_max_backoff", cfg.WebhookMaxBackoff}, {"webhook_tick", cfg.TickEvery}} {
		if d.v != 0 {
			items = append(items, d.name+"="+d.v.String())
		}
	}
	return strings.Join(items, ",")
}
