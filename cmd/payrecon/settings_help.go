package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// helpRow is one flag or setting in a help: a line with its head (the
// flag and its type) and its default, then its text, indented.
type helpRow struct{ head, def, text string }

// printRows writes rows, their defaults in a column after the widest
// head of a flag.
func printRows(w io.Writer, rows []helpRow) {
	width := 0
	for _, r := range rows {
		if strings.HasPrefix(r.head, "-") {
			width = max(width, len(r.head))
		}
	}
	for _, r := range rows {
		line := fmt.Sprintf("  %-*s  %s", width, r.head, r.def)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		for _, l := range wrap(r.text, 70) {
			fmt.Fprintf(w, "        %s\n", l)
		}
	}
}

// printSettings writes the settings named (all of them when names is
// nil) as the help shows them, with their defaults in command: a line
// with the flag, its type and its default, then, indented, the
// environment variable and the meaning. An environment-only setting's
// line names its variable.
func (s *settings) printSettings(w io.Writer, names []string, command string) {
	var rows []helpRow
	for _, st := range s.list {
		if names != nil && !slices.Contains(names, st.name) {
			continue
		}
		r := helpRow{head: st.env + " (environment only)", text: st.usage}
		if !st.envOnly {
			r.head = "--" + st.name
			if st.kind != kindBool {
				r.head += " " + st.kind.typ
			}
			r.text = st.env + ": " + st.usage
		}
		if d := st.defaultFor(command); d != "" {
			r.def = "default " + d
		}
		if command == "" {
			for _, c := range slices.Sorted(mapKeys(st.defFor)) {
				r.def += fmt.Sprintf(" (%s %s)", c, st.defFor[c])
			}
		}
		rows = append(rows, r)
	}
	printRows(w, rows)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// wrap splits text into lines of at most width bytes, between words.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// markdownSettings is the table of the settings in docs/configuration.md.
func (s *settings) markdownSettings() string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	for _, st := range s.list {
		flagCol := "—"
		if !st.envOnly {
			flagCol = "`--" + st.name + "`"
			if st.kind != kindBool {
				flagCol = "`--" + st.name + " " + st.kind.typ + "`"
			}
		}
		def := "—"
		if st.def != "" {
			def = "`" + st.def + "`"
		}
		for _, c := range slices.Sorted(mapKeys(st.defFor)) {
			def += fmt.Sprintf(" (%s: `%s`)", c, st.defFor[c])
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", flagCol, st.env, def, strings.ReplaceAll(st.usage, "|", "\\|"))
	}
	return b.String()
}
