package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/peterbourgon/ff/v3"
)

// configFileParser reads a config file as ff.PlainParser does, one line at
// a time, so that an error names its line: an unknown setting's error
// names the nearest known one, a bad value's line is kept in s.badLine.
func (s *settings) configFileParser(path func() string) ff.ConfigFileParser {
	return func(r io.Reader, set func(name, value string) error) error {
		sc := bufio.NewScanner(r)
		for n := 1; sc.Scan(); n++ {
			err := ff.PlainParser(strings.NewReader(sc.Text()), func(name, value string) error {
				if !s.inConfigFile(name) {
					return s.unknownSetting(path(), n, name)
				}
				s.badLine = n
				return set(name, value)
			})
			if err != nil {
				return err
			}
		}
		return sc.Err()
	}
}

// inConfigFile reports whether name is a setting the config file may
// set: by its flag's name or, as ff allows, its environment variable's.
func (s *settings) inConfigFile(name string) bool {
	for _, st := range s.list {
		if !st.envOnly && (st.name == name || st.env == name) {
			return true
		}
	}
	return false
}

// unknownSetting says that line n of the config file at path names
// no setting, and which known setting is nearest, if one is near.
func (s *settings) unknownSetting(path string, n int, name string) error {
	msg := fmt.Sprintf("%s:%d: unknown setting %q", path, n, name)
	best, bestDist := "", len(name)/3+2
	for _, st := range s.list {
		if st.envOnly {
			continue
		}
		if d := editDistance(name, st.name); d < bestDist {
			best, bestDist = st.name, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf("; did you mean %q?", best)
	}
	return unknownSettingError{msg}
}

// unknownSettingError is a config file's line that names no setting; its
// message says all, without ff's words around it.
type unknownSettingError struct{ msg string }

func (e unknownSettingError) Error() string { return e.msg }

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
