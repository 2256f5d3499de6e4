package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSubscriptionsCommands: add, list (the secret and the URL's
// password and query values never shown), replay
// and remove a subscription, and the refusals, on a SQLite file.
func TestSubscriptionsCommands(t *testing.T) {
	unsetenv(t, settingEnvs()...)
	db := "sqlite:" + filepath.Join(t.TempDir(), "s.db")
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("whsec_shop_0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		args []string
		code int
		want string // in stdout, or stderr when code != 0
	}{
		{[]string{"subscriptions", "add", "shop", "--url", "https://shop.example/payrecon", "--secret-file", secretFile, "--types", "purchase.succeeded,refund.succeeded"}, 0, "subscription shop added"},
		{[]string{"subscriptions", "add", "shop", "--url", "https://shop.example/other", "--secret-file", secretFile}, 1, "exists"},
		{[]string{"subscriptions", "add", "bad", "--url", "ftp://x", "--secret-file", secretFile}, 2, "url"},
		{[]string{"subscriptions", "add", "bad", "--url", "https://x", "--secret-file", secretFile, "--types", "purchase.exploded"}, 2, "unknown event type"},
		{[]string{"subscriptions", "add", "nosecret", "--url", "https://x"}, 2, subscriptionSecretEnv},
		{[]string{"subscriptions", "list"}, 0, "purchase.succeeded,refund.succeeded"},
		{[]string{"subscriptions", "add", "tokened", "--url", "https://hook:pa55@shop.example/in?token=s3cret", "--secret-file", secretFile}, 0, "https://hook:****@shop.example/in?token=****"},
		{[]string{"subscriptions", "list"}, 0, "https://hook:****@shop.example/in?token=****"},
		{[]string{"subscriptions", "list", "--json"}, 0, `"url": "https://hook:****@shop.example/in?token=****"`},
		{[]string{"subscriptions", "remove", "tokened"}, 0, "subscription tokened removed"},
		{[]string{"events", "replay", "--since", "24h", "--subscription", "shop"}, 0, "0 deliveries"},
		{[]string{"events", "replay", "--since", "24h", "--subscription", "nobody"}, 1, "no subscription named nobody"},
		{[]string{"events", "replay"}, 2, "--since is required"},
		{[]string{"subscriptions", "remove", "shop"}, 0, "subscription shop removed"},
		{[]string{"subscriptions", "remove", "shop"}, 1, "no subscription named shop"},
		{[]string{"subscriptions", "list"}, 0, "no subscriptions"},
	} {
		code, out, stderr := run(t, nil, append(step.args, "--database-url", db)...)
		got := out
		if step.code != 0 {
			got = stderr
		}
		if code != step.code || !strings.Contains(got, step.want) {
			t.Fatalf("payrecon %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(step.args, " "), code, out, stderr, step.code, step.want)
		}
		if strings.Contains(out+stderr, "whsec_shop") || strings.Contains(out+stderr, "s3cret") || strings.Contains(out+stderr, "pa55") {
			t.Fatalf("payrecon %s printed a secret: %s%s", strings.Join(step.args, " "), out, stderr)
		}
	}
}
