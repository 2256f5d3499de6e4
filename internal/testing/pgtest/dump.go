package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// clientTool returns the path of a client program (pg_dump, pg_restore)
// of the server's own release: from the directory findBinaries finds
// initdb in, else from PATH (for an external server, EnvURL).
func clientTool(name string) (string, error) {
	if dir, err := findBinaries(); err == nil {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("pgtest: %s: not beside initdb nor on PATH: %w", name, err)
	}
	return p, nil
}

// Dump takes a backup of the database at dbURL (a URL from NewDatabase)
// with pg_dump in its custom format and returns the archive's path, in a
// temporary directory of tb's. Like NewDatabase it ends tb when the tool
// is missing or fails.
func Dump(tb testing.TB, dbURL string) string {
	tb.Helper()
	bin, err := clientTool("pg_dump")
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(tb.TempDir(), "backup.dump")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if b, err := exec.CommandContext(ctx, bin, "--format=custom", "--no-owner", "--file", out, "--dbname", dbURL).CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: pg_dump: %v\n%s", err, b)
	}
	return out
}

// Restore replaces the database at dbURL (a URL from NewDatabase) with
// the archive Dump made: it drops the database (closing every connection
// to it), creates it empty under the same name and loads the archive with
// pg_restore, as an operator restoring an old backup does. The caller
// closes its own connections first and opens new ones after.
func Restore(tb testing.TB, dbURL, archive string) {
	tb.Helper()
	bin, err := clientTool("pg_restore")
	if err != nil {
		tb.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatalf("pgtest: restore: %v", err)
	}
	name := pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()
	s := getServer(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
		tb.Fatalf("pgtest: restore: drop %s: %v", name, err)
	}
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: restore: create %s: %v", name, err)
	}
	if b, err := exec.CommandContext(ctx, bin, "--no-owner", "--exit-on-error", "--dbname", dbURL, archive).CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: pg_restore: %v\n%s", err, b)
	}
}
