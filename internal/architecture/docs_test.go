package architecture

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

func readDoc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section returns the text of doc's section under heading (a whole line,
// such as "## Layout") up to the next heading of the same level or
// higher.
func section(t *testing.T, doc, name, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", name, heading)
	}
	level := len(heading) - len(strings.TrimLeft(heading, "#"))
	var b strings.Builder
	for _, line := range prose(rest) {
		if m := headingRE.FindString(line); m != "" && len(line)-len(strings.TrimLeft(line, "#")) <= level {
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// handbook lists docs/*.md, leaving out the drafts named pending-*.
func handbook(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		if name := filepath.Base(p); !strings.HasPrefix(name, "pending-") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatal("no docs/*.md")
	}
	return names
}

// TestLayout: the layout in docs/architecture.md names every package go
// list finds and every page of docs/, and the README's map of docs/ links
// every page.
func TestLayout(t *testing.T) {
	layout := section(t, readDoc(t, "docs/architecture.md"), "docs/architecture.md", "## Layout")
	for path := range list(t) {
		if !own(path) || short(path) == "" {
			continue
		}
		if !strings.Contains(layout, "`"+short(path)+"/`") {
			t.Errorf("docs/architecture.md's layout does not name the package %s (as `%s/`)", short(path), short(path))
		}
	}
	readme := readDoc(t, "README.md")
	for _, name := range handbook(t) {
		if !strings.Contains(layout, "("+name+")") {
			t.Errorf("docs/architecture.md's layout does not link docs/%s", name)
		}
		if !strings.Contains(readme, "(docs/"+name+")") {
			t.Errorf("README.md's map of docs/ does not link docs/%s", name)
		}
	}
}

// TestREADMECommands: the README's two commands are the ones a newcomer
// needs, and its test command is the one CI runs.
func TestREADMECommands(t *testing.T) {
	const demo, suite = "go run ./cmd/payrecon demo", "go test -race -timeout 30m ./..."
	readme := readDoc(t, "README.md")
	for _, cmd := range []string{demo, suite} {
		if !strings.Contains(readme, "```sh\n"+cmd+"\n```\n") {
			t.Errorf("README.md has no sh block of its own for %q", cmd)
		}
	}
	ci := readDoc(t, ".ci/run")
	if !slices.Contains(strings.Split(ci, "\n"), suite) {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", suite)
	}
}

// markdown lists the repository's Markdown files that readers follow links
// in: the README, docs/ and the packages' READMEs.
func markdown(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, name := range handbook(t) {
		files = append(files, "docs/"+name)
	}
	readmes, err := filepath.Glob(filepath.Join(root, "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readmes {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6} +(.+?) *#*$`)
)

// prose returns doc's lines outside fenced code blocks.
func prose(doc string) []string {
	var out []string
	fenced := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the anchors GitHub gives doc's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeated one numbered.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(doc) {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocLinks: every relative link in the README, docs/ and the
// packages' READMEs reaches a file, and its anchor, if any, a heading of
// that file.
func TestDocLinks(t *testing.T) {
	for _, file := range markdown(t) {
		doc := readDoc(t, file)
		for _, line := range prose(doc) {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				target, anchor, _ := strings.Cut(link, "#")
				path := file
				if target != "" {
					path = filepath.ToSlash(filepath.Join(filepath.Dir(file), target))
				}
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s: link %s: no file %s", file, link, path)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s: link %s: an anchor in a file that is not Markdown", file, link)
					continue
				}
				if !anchors(readDoc(t, path))[anchor] {
					t.Errorf("%s: link %s: %s has no heading with the anchor #%s", file, link, path, anchor)
				}
			}
		}
	}
}
