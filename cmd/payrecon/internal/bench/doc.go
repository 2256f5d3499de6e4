// Package bench is `payrecon bench`: it measures payrecon's capacity on
// the user's own database, as pgbench measures Postgres'. Its benches
// (the worker's burn-down, the webhook endpoint, the purchase API, the
// drain of a backlog within the shared rate budget) run the code that
// serves production against the in-process fake provider; the package
// holds them, their drivers and progress lines, the Postgres counters,
// the CPU time of a timed phase and the bench process's memory, and the
// report. It reads no flag, setting or environment variable:
// cmd/payrecon parses the command line and passes a Config, with the
// functions that open the store and wire serve's HTTP server.
package bench
