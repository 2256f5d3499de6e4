package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		spec string
		want fakeprovider.Config
	}{
		{"", fakeprovider.Config{}},
		{"  ", fakeprovider.Config{}},
		{
			"lost_reply=0.2,timeout=0.1,stale_processing=0.1,search_lag=30s,seed=7",
			fakeprovider.Config{
				Faults:    fakeprovider.Faults{LostReply: 0.2, Timeout: 0.1, StaleProcessing: 0.1},
				SearchLag: 30 * time.Second,
				Seed:      7,
			},
		},
		{
			"fail_before=0.1, timeout=0.1 ,lost_reply = 0.1,processing=0.1,processing_decline=0.1," +
				"stale_processing=0.1,decline=0.1,search_lag=0s,list_lag=2s,settle_after=2m,key_retention=48h,seed=-3",
			fakeprovider.Config{
				Faults: fakeprovider.Faults{
					FailBefore: 0.1, Timeout: 0.1, LostReply: 0.1, Processing: 0.1,
					ProcessingDecline: 0.1, StaleProcessing: 0.1, Decline: 0.1,
				},
				ListLag:      2 * time.Second,
				SettleAfter:  2 * time.Minute,
				KeyRetention: 48 * time.Hour,
				Seed:         -3,
			},
		},
		{
			"rate_global=25,rate_create=20,rate_retrieve=5,rate_search=4,rate_list=3,rate_refund=2,rate_retry_after=2s",
			fakeprovider.Config{RateLimits: fakeprovider.RateLimits{Global: 25, Create: 20, Retrieve: 5, Search: 4, List: 3, Refund: 2, RetryAfter: 2 * time.Second}},
		},
		// Sums to 1.0000000000000002 in float64: rounding is tolerated.
		{"timeout=0.1,lost_reply=0.2,decline=0.7", fakeprovider.Config{Faults: fakeprovider.Faults{Timeout: 0.1, LostReply: 0.2, Decline: 0.7}}},
		{"decline=1", fakeprovider.Config{Faults: fakeprovider.Faults{Decline: 1}}},
		{"list_lag=0s", fakeprovider.Config{}},
		{"list_lag=1m30s", fakeprovider.Config{ListLag: 90 * time.Second}},
		{
			"refund_lost_reply=0.2, refund_processing_decline=0.1,lost_reply=0.3",
			fakeprovider.Config{
				Faults:       fakeprovider.Faults{LostReply: 0.3},
				RefundFaults: fakeprovider.Faults{LostReply: 0.2, ProcessingDecline: 0.1},
			},
		},
		// Each kind of call sums to at most 1 on its own.
		{"decline=1,refund_decline=1", fakeprovider.Config{Faults: fakeprovider.Faults{Decline: 1}, RefundFaults: fakeprovider.Faults{Decline: 1}}},
	}
	for _, tc := range tests {
		got, err := fakeprovider.ParseConfig(tc.spec)
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", tc.spec, err)
			continue
		}
		// Config holds a func, so compare field by field.
		if got.Faults != tc.want.Faults || got.RefundFaults != tc.want.RefundFaults || got.Seed != tc.want.Seed || got.SearchLag != tc.want.SearchLag || got.ListLag != tc.want.ListLag ||
			got.SettleAfter != tc.want.SettleAfter || got.KeyRetention != tc.want.KeyRetention || got.RateLimits != tc.want.RateLimits ||
			got.Now != nil || got.OnAccept != nil || got.OnAcceptRefund != nil {
			t.Errorf("ParseConfig(%q) = %+v, want %+v", tc.spec, got, tc.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	const names = "fail_before, timeout, lost_reply, processing, processing_decline, stale_processing, decline, each also prefixed with refund_, search_lag, list_lag, settle_after, key_retention, seed, rate_<global|create|retrieve|search|list|refund>, rate_retry_after"
	tests := []struct{ spec, want string }{
		{"rate_create=-1", "fake faults: rate_create=-1: not an int >= 0"},
		{"rate_bogus=1", "fake faults: rate_bogus=1: unknown name (want one of " + names + ")"},
		{"lost_reply=1.5", "fake faults: lost_reply=1.5: probability must be in [0,1]"},
		{"timeout=-0.1", "fake faults: timeout=-0.1: probability must be in [0,1]"},
		{"decline=NaN", "fake faults: decline=NaN: probability must be in [0,1]"},
		{" lost_reply = 1.5 ", "fake faults: lost_reply=1.5: probability must be in [0,1]"},
		{"lost_reply=abc", "fake faults: lost_reply=abc: not a number"},
		{"bogus=1", "fake faults: bogus=1: unknown name (want one of " + names + ")"},
		{"Lost_Reply=0.1", "fake faults: Lost_Reply=0.1: unknown name (want one of " + names + ")"},
		{"lost_reply", `fake faults: "lost_reply": want name=value`},
		{"lost_reply=", `fake faults: "lost_reply=": want name=value`},
		{"=0.1", `fake faults: "=0.1": want name=value`},
		{"lost_reply=0.1,,timeout=0.1", "fake faults: item 2 is empty"},
		{"lost_reply=0.1,", "fake faults: item 2 is empty"},
		{"timeout=0.1,timeout=0.2", "fake faults: timeout=0.2: timeout given twice"},
		{"seed=1,seed=1", "fake faults: seed=1: seed given twice"},
		{"lost_reply=0.6,timeout=0.5", "fake faults: probabilities sum to 1.1, must be at most 1"},
		{"refund_lost_reply=1.5", "fake faults: refund_lost_reply=1.5: probability must be in [0,1]"},
		{"refund_lost_reply=0.6,refund_timeout=0.5", "fake faults: refund probabilities sum to 1.1, must be at most 1"},
		{"refund_bogus=1", "fake faults: refund_bogus=1: unknown name (want one of " + names + ")"},
		{"refund_seed=1", "fake faults: refund_seed=1: unknown name (want one of " + names + ")"},
		{"refund_timeout=0.1,refund_timeout=0.1", "fake faults: refund_timeout=0.1: refund_timeout given twice"},
		{"search_lag=soon", "fake faults: search_lag=soon: not a duration (want e.g. 30s, 1m, 24h)"},
		{"search_lag=30", "fake faults: search_lag=30: not a duration (want e.g. 30s, 1m, 24h)"},
		{"search_lag=-1s", "fake faults: search_lag=-1s: duration must not be negative"},
		{"list_lag=-1s", "fake faults: list_lag=-1s: duration must not be negative"},
		{"list_lag=1", "fake faults: list_lag=1: not a duration (want e.g. 30s, 1m, 24h)"},
		{"list_lag=1s,list_lag=2s", "fake faults: list_lag=2s: list_lag given twice"},
		{"settle_after=0s", "fake faults: settle_after=0s: duration must be positive"},
		{"settle_after=-1m", "fake faults: settle_after=-1m: duration must not be negative"},
		{"key_retention=0", "fake faults: key_retention=0: duration must be positive"},
		{"key_retention=1d", "fake faults: key_retention=1d: not a duration (want e.g. 30s, 1m, 24h)"},
		{"seed=1.5", "fake faults: seed=1.5: not an int64"},
		{"seed=99999999999999999999", "fake faults: seed=99999999999999999999: not an int64"},
	}
	for _, tc := range tests {
		_, err := fakeprovider.ParseConfig(tc.spec)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseConfig(%q) error = %v, want %q", tc.spec, err, tc.want)
		}
	}
}

func TestParseServerConfig(t *testing.T) {
	cfg, err := fakeprovider.ParseServerConfig(" webhook_delay=0.2, webhook_duplicate=0.25,webhook_reorder=0.1,webhook_drop=0.05,webhook_stale_processing=1," +
		"webhook_attempts=3,webhook_backoff=10ms,webhook_max_backoff=1s,webhook_tick=250ms")
	if err != nil {
		t.Fatal(err)
	}
	want := fakeprovider.ServerConfig{
		WebhookFaults:      fakeprovider.WebhookFaults{Delay: 0.2, Duplicate: 0.25, Reorder: 0.1, Drop: 0.05, StaleProcessing: 1},
		WebhookMaxAttempts: 3, WebhookBackoff: 10 * time.Millisecond, WebhookMaxBackoff: time.Second, TickEvery: 250 * time.Millisecond,
	}
	if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
		t.Errorf("ParseServerConfig = %+v, want %+v", cfg, want)
	}
	if cfg, err := fakeprovider.ParseServerConfig(" "); err != nil || cfg.WebhookFaults.Validate() != nil || cfg.WebhookMaxAttempts != 0 {
		t.Errorf("empty spec = (%+v, %v)", cfg, err)
	}
	for spec, wantErr := range map[string]string{
		"webhook_drop=1.5":                    "fake faults: webhook_drop=1.5: probability must be in [0,1]",
		"webhook_drop=x":                      "fake faults: webhook_drop=x: not a number",
		"webhook_drop=0.1,webhook_drop=0.2":   "fake faults: webhook_drop=0.2: webhook_drop given twice",
		"webhook_attempts=0":                  "fake faults: webhook_attempts=0: not an int >= 1",
		"webhook_backoff=0s":                  "fake faults: webhook_backoff=0s: duration must be positive",
		"webhook_lost=0.1":                    "fake faults: webhook_lost=0.1: unknown name",
		"lost_reply=0.1":                      "fake faults: lost_reply=0.1: unknown name",
		"webhook_drop=0.1,,webhook_delay=0.1": "fake faults: item 2 is empty",
	} {
		_, err := fakeprovider.ParseServerConfig(spec)
		if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Errorf("ParseServerConfig(%q) error %v, want %q...", spec, err, wantErr)
		}
	}
}

func TestParseSpec(t *testing.T) {
	cfg, scfg, err := fakeprovider.ParseSpec("lost_reply=0.1, webhook_drop=0.2,seed=7,webhook_attempts=2,search_lag=30s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Faults.LostReply != 0.1 || cfg.Seed != 7 || cfg.SearchLag != 30*time.Second || scfg.WebhookFaults.Drop != 0.2 || scfg.WebhookMaxAttempts != 2 {
		t.Errorf("ParseSpec = %+v, %+v", cfg, scfg)
	}
	for spec, wantErr := range map[string]string{
		"lost_reply=2,webhook_drop=0.1": "fake faults: lost_reply=2",
		"lost_reply=0.1,webhook_drop=2": "fake faults: webhook_drop=2",
		"lost_reply=0.1,,seed=1":        "fake faults: item 2 is empty",
	} {
		if _, _, err := fakeprovider.ParseSpec(spec); err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Errorf("ParseSpec(%q) error %v, want %q...", spec, err, wantErr)
		}
	}
	if cfg, scfg, err := fakeprovider.ParseSpec(""); err != nil || cfg.Faults != (fakeprovider.Faults{}) || scfg.WebhookFaults != (fakeprovider.WebhookFaults{}) {
		t.Errorf("ParseSpec(\"\") = (%+v, %+v, %v)", cfg, scfg, err)
	}
}

func TestFaultsValidate(t *testing.T) {
	for _, fs := range []fakeprovider.Faults{{}, {Decline: 1}, {LostReply: 0.5, Timeout: 0.5}} {
		if err := fs.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", fs, err)
		}
	}
	tests := []struct {
		fs   fakeprovider.Faults
		want string
	}{
		{fakeprovider.Faults{ProcessingDecline: 2}, "fake faults: processing_decline=2: probability must be in [0,1]"},
		{fakeprovider.Faults{FailBefore: -1}, "fake faults: fail_before=-1: probability must be in [0,1]"},
		{fakeprovider.Faults{Processing: 0.75, Decline: 0.5}, "fake faults: probabilities sum to 1.25, must be at most 1"},
	}
	for _, tc := range tests {
		if err := tc.fs.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v.Validate() = %v, want %q", tc.fs, err, tc.want)
		}
	}
}

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	for _, cfg := range []fakeprovider.Config{
		{Faults: fakeprovider.Faults{LostReply: 1.5}},
		{RefundFaults: fakeprovider.Faults{LostReply: 0.5, Timeout: 0.6}},
		{KeyRetention: -time.Hour},
		{SettleAfter: -time.Second},
		{SearchLag: -time.Second},
		{ListLag: -time.Second},
		{Instance: "a_b"},
		{Instance: "run-1"},
		{Instance: "é"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", cfg)
				}
			}()
			fakeprovider.New(cfg)
		}()
	}
}

func TestFaultErrorClassification(t *testing.T) {
	tests := []struct {
		fault   fakeprovider.Fault
		wrapped error
		outcome provider.Outcome
	}{
		{fakeprovider.FailBefore, provider.ErrRetryLater, provider.RetryLater},
		{fakeprovider.Timeout, context.DeadlineExceeded, provider.Unknown},
		{fakeprovider.LostReply, io.ErrUnexpectedEOF, provider.Unknown},
	}
	for _, tc := range tests {
		err := &fakeprovider.FaultError{Fault: tc.fault, PurchaseID: "pur_1"}
		if !errors.Is(err, tc.wrapped) {
			t.Errorf("%s: error %q does not wrap %v", tc.fault, err, tc.wrapped)
		}
		if got := provider.OutcomeOf(provider.Result{}, err); got != tc.outcome {
			t.Errorf("%s: OutcomeOf = %q, want %q", tc.fault, got, tc.outcome)
		}
	}
}
