package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/provider"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/sqlite"
)

// The checks of each kind of setting. Each error says what is wanted, without
// repeating the value (the caller shows it, or hides a secret).

func checkDuration(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return errors.New("want a positive duration such as 30s or 2m")
	}
	return nil
}

func parseDurations(v string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, errors.New("want positive durations separated by commas, such as 30s,2m,10m,1h")
		}
		out = append(out, d)
	}
	return out, nil
}

func checkDurations(v string) error {
	_, err := parseDurations(v)
	return err
}

func checkCount(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n != int64(int(n)) {
		return errors.New("want a positive whole number")
	}
	return nil
}

// checkAccounts checks a comma-separated list of connected accounts as
// reconcile.Config does, so that a typo stops the command at once.
func checkAccounts(v string) error {
	_, _, err := parseAccounts(v)
	return err
}

// parseAccounts parses --accounts: connected accounts, comma-separated,
// each with its own limit in calls a second after "=" if it has one
// ("acct_1A,acct_1B=100").
func parseAccounts(v string) (accounts []string, limits map[string]float64, err error) {
	var errs []error
	for _, item := range splitList(v) {
		a, limit, hasLimit := strings.Cut(item, "=")
		a = strings.TrimSpace(a)
		if _, err := provider.ParseAccount(a); err != nil || a == provider.PlatformAccount {
			errs = append(errs, fmt.Errorf("%q is not a connected account: want acct_ followed by letters and digits", a))
			continue
		}
		accounts = append(accounts, a)
		if !hasLimit {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(limit), 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			errs = append(errs, fmt.Errorf("%s=%s: the account's limit must be a positive number of calls a second", a, limit))
			continue
		}
		if limits == nil {
			limits = map[string]float64{}
		}
		limits[a] = f
	}
	return accounts, limits, errors.Join(errs...)
}

// splitList splits a comma-separated setting, dropping blanks around and
// between its items.
func splitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func checkRate(v string) error {
	if v == "" {
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return errors.New("want a positive number of calls per second")
	}
	return nil
}

func checkBool(v string) error {
	if _, err := strconv.ParseBool(v); err != nil {
		return errors.New("want true or false")
	}
	return nil
}

func checkOneOf(values ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(values, v) {
			return fmt.Errorf("want %s", strings.Join(values, " or "))
		}
		return nil
	}
}

// checkSynchronous checks a SQLite synchronous setting as the store
// does.
func checkSynchronous(v string) error {
	_, err := sqlite.ParseSynchronous(v)
	return err
}

func checkLevel(v string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(v)); err != nil {
		return errors.New("want debug, info, warn or error")
	}
	return nil
}

func checkAddr(v string) error {
	if v == "" {
		return nil // the default
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return errors.New("want HOST:PORT, such as 127.0.0.1:8080 (port 0 picks a free one)")
	}
	return nil
}

func checkHTTPURL(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL, such as http://127.0.0.1:12111")
	}
	return nil
}

func checkDatabaseURL(v string) error {
	_, err := dburl.Parse(v)
	return err
}

// checkSchedule accepts what the sweeps' scheduler accepts: a standard
// cron line (5 fields), a descriptor (@hourly, @every 30s), optionally
// after TZ=ZONE and a space.
//
// robfig/cron v3.0.1 panics on a TZ= or CRON_TZ= prefix with no space
// after it (it slices up to the missing space; FuzzSettings found it,
// testdata/fuzz/FuzzSettings/632ead4825ed8702): such a schedule is
// refused here, before the scheduler sees it, and any other panic of the
// parser is taken for a refusal too.
func checkSchedule(v string) (err error) {
	if (strings.HasPrefix(v, "TZ=") || strings.HasPrefix(v, "CRON_TZ=")) && !strings.Contains(v, " ") {
		return errors.New("want TZ=ZONE, a space and the schedule, such as \"TZ=Europe/Paris 0 9 * * *\"")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("not a schedule (%v)", r)
		}
	}()
	if _, err := robfig.ParseStandard(v); err != nil {
		return fmt.Errorf("%w: want a cron schedule such as \"*/5 * * * *\", @hourly or \"@every 30s\"", err)
	}
	return nil
}

func checkFaults(v string) error {
	_, _, err := fakeprovider.ParseSpec(v)
	return err
}

func checkAPITokens(v string) error {
	if v == "" {
		return nil
	}
	_, err := rhttp.ParseAPITokens(v)
	return err
}

func checkToken(v string) error {
	if v != "" && len(v) < minTokenLen {
		return fmt.Errorf("the token is shorter than %d characters", minTokenLen)
	}
	return nil
}
