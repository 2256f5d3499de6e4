// Package crashtest holds the tests that kill payrecon's real processes:
// the crash test, which kills a process at every named crash point
// (internal/crashpoint) and checks that every effect happened once, and
// the chaos test, which kills random processes, restarts PostgreSQL and
// takes the provider down while purchases, refunds and webhooks flow.
//
// They live in a package of their own, not in cmd/payrecon's tests,
// because they test the built binary from outside, as an operator runs
// it: they build it once with -tags failpoints, start it as separate
// processes (payrecon fakeprovider, serve, worker, audit) and talk to
// them over HTTP and the database only. Kept apart, they need none of
// cmd/payrecon's internals, their TestMain builds the binary once, and a
// plain `go test ./...` runs them only when asked (PAYRECON_CRASHTEST=1)
// or under CI, since they take minutes.
//
// The package has no code outside its tests.
package crashtest
