package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Dockerfile.

type dockerInstruction struct {
	op, args string
	line     int
}

func readDockerfile(t *testing.T, name string) []dockerInstruction {
	t.Helper()
	var out []dockerInstruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(readFile(t, name)), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(trimmed)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstruction{strings.ToUpper(op), strings.TrimSpace(args), start})
		cur.Reset()
	}
	return out
}

// TestDockerfile: multi-stage, the Go of go.mod, the build this test
// repeats, a minimal base, a non-root user, payrecon as the entrypoint,
// the port it listens on exposed.
func TestDockerfile(t *testing.T) {
	cl := cli(t)
	ins := readDockerfile(t, "Dockerfile")
	var froms []int
	for i, in := range ins {
		if in.op == "FROM" {
			froms = append(froms, i)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("%d stages: want a build stage and a runtime stage", len(froms))
	}

	// The build stage: golang at go.mod's release, the test's build.
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(readFile(t, "../go.mod"))
	if goLine == nil {
		t.Fatal("no go line in go.mod")
	}
	image := regexp.MustCompile(`\bgolang:(\d+\.\d+)`).FindStringSubmatch(ins[froms[0]].args)
	if image == nil || image[1] != string(goLine[1]) {
		t.Errorf("build stage %q: want golang:%s (go.mod)", ins[froms[0]].args, goLine[1])
	}
	built := false
	for _, in := range ins[:froms[len(froms)-1]] {
		if in.op == "RUN" && strings.Contains(in.args, dockerGoBuild) {
			built = true
			if !strings.Contains(in.args, cgoOff) || !strings.HasSuffix(in.args, " "+mainPackage) {
				t.Errorf("line %d: %s: want %s %s … %s, as this test builds", in.line, in.args, cgoOff, dockerGoBuild, mainPackage)
			}
		}
	}
	if !built {
		t.Errorf("no RUN %s %s … %s", cgoOff, dockerGoBuild, mainPackage)
	}

	// The runtime stage.
	final := ins[froms[len(froms)-1]:]
	base := strings.Fields(final[0].args)[0]
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("runtime base %s: want distroless static or scratch", base)
	}
	var user, entrypoint, cmd, expose string
	env := map[string]string{}
	copied := false
	for _, in := range final {
		switch in.op {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "CMD":
			cmd = in.args
		case "EXPOSE":
			expose = in.args
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		case "COPY":
			if strings.HasSuffix(in.args, " "+installedBinary) {
				copied = true
			}
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("USER %q: run as a non-root user", user)
	}
	if !copied {
		t.Errorf("the runtime stage does not copy the binary to %s", installedBinary)
	}
	var ep, args []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || !slices.Equal(ep, []string{"payrecon"}) {
		t.Errorf(`ENTRYPOINT %s: want ["payrecon"]`, entrypoint)
	}
	if err := json.Unmarshal([]byte(cmd), &args); err != nil {
		t.Errorf("CMD %s: %v", cmd, err)
	}
	cl.checkArgs(t, "Dockerfile CMD", args)
	cl.checkEnv(t, "Dockerfile", env)
	port, everywhere := listenPort(t, "Dockerfile PAYRECON_ADDR", env["PAYRECON_ADDR"])
	if !everywhere || expose != port {
		t.Errorf("ENV PAYRECON_ADDR=%s, EXPOSE %s: listen on every interface, on the exposed port", env["PAYRECON_ADDR"], expose)
	}
}
