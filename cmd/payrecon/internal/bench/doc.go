// Package bench is `payrecon bench`'s measurement harness: the CPU time
// of a timed phase (the process's and the machine's) and the memory of
// the bench process. It reads no flag, setting or environment variable:
// cmd/payrecon parses the command line and runs the benches.
package bench
