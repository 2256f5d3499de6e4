package reconcile_test

import (
	"os"
	"testing"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
