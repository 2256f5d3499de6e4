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

// settingGroups are the headings of a command's settings in its help, in
// order; a setting is shown under the first group that holds it.
var settingGroups = []struct {
	heading string
	names   []string
}{
	{"General", basicSettings},
	{"Store", storeSettings},
	{"HTTP", httpSettings},
	{"Provider", providerSettings},
	{"Protocol", protocolSettings},
	{"Sweeps", sweepSettings},
}

// compactColumn is the width of a column of printCompact; an item wider
// than it takes the line alone.
const compactColumn = 38

// printCompact writes the settings named, in command, as a command's help
// shows them: each as --name=default (an environment-only one as its
// variable), two a line, under the headings of settingGroups when the
// command reads settings of more than one group.
func (s *settings) printCompact(w io.Writer, names []string, command string) {
	shown := map[string]bool{}
	type group struct {
		heading string
		items   []string
	}
	var groups []group
	add := func(heading string, of []string) {
		g := group{heading: heading}
		for _, name := range of {
			st := s.byKey[name]
			if st == nil || shown[name] || !slices.Contains(names, name) {
				continue
			}
			shown[name] = true
			item := st.env
			if !st.envOnly {
				item = "--" + st.name
				if d := st.defaultFor(command); d != "" {
					item += "=" + d
				}
			}
			g.items = append(g.items, item)
		}
		if len(g.items) > 0 {
			groups = append(groups, g)
		}
	}
	for _, g := range settingGroups {
		add(g.heading, g.names)
	}
	add("Other", names)
	for _, g := range groups {
		indent := "  "
		if len(groups) > 1 {
			fmt.Fprintf(w, "  %s:\n", g.heading)
			indent = "    "
		}
		line := ""
		for _, item := range g.items {
			switch {
			case line == "":
				line = item
			case len(line) <= compactColumn && len(item) <= compactColumn:
				fmt.Fprintf(w, "%s%-*s %s\n", indent, compactColumn, line, item)
				line = ""
				continue
			default:
				fmt.Fprintf(w, "%s%s\n", indent, line)
				line = item
				continue
			}
		}
		if line != "" {
			fmt.Fprintf(w, "%s%s\n", indent, line)
		}
	}
}
