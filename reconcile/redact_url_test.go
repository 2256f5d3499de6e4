package reconcile_test

import (
	"testing"

	"github.com/payrecon/payrecon/reconcile"
)

// TestRedactURL: passwords, query values and fragments are masked; the
// user name, host, path and parameter names stay.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://shop.example/events", "https://shop.example/events"},
		{"https://user:pa55@shop/x?token=abc", "https://user:****@shop/x?token=****"},
		{"https://user@shop/x", "https://user@shop/x"},
		{"http://shop:8080/hook?token=abc&v=2&flag", "http://shop:8080/hook?token=****&v=****&flag"},
		{"https://shop/x?a=1&a=2", "https://shop/x?a=****&a=****"},
		{"https://shop/x#secret", "https://shop/x#****"},
		{"https://u:p%40ss@shop/x?t=a%20b", "https://u:****@shop/x?t=****"},
		{"http://shop/%zz?token=abc", "http://****"},
		{"", ""},
	} {
		if got := reconcile.RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
