package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// runVersion prints the version from the build information: the module
// version ("(devel)" for a build from a work tree), the VCS revision and
// commit time when the build recorded them, and the Go version. It reads
// no setting, so that it works whatever the environment holds.
func runVersion(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("payrecon version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			e.printHelp("version", fs)
			return err
		}
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: version takes none", fs.Args()))
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprint(e.stdout, versionText(bi, ok))
	return nil
}

// versionText writes the build information bi (ok false when the binary
// has none).
func versionText(bi *debug.BuildInfo, ok bool) string {
	var b strings.Builder
	if !ok || bi == nil {
		fmt.Fprintf(&b, "payrecon (unknown version: no build information)\ngo        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return b.String()
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	fmt.Fprintf(&b, "payrecon %s\n", version)
	if bi.Main.Path != "" {
		fmt.Fprintf(&b, "module    %s\n", bi.Main.Path)
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		if vcs["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		fmt.Fprintf(&b, "revision  %s\n", rev)
	}
	if t := vcs["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "time      %s\n", t)
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(&b, "go        %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
