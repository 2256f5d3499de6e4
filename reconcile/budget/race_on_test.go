//go:build race

package budget_test

// raceDetector reports whether the tests run under the race detector,
// which slows them several times over: tests that measure a rate against
// a limit scale the limit down with it.
const raceDetector = true
