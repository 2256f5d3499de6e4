// Command gen writes model/transitions.pml, the purchase machine's states
// and allowed moves for the Promela model, from package statemachine. It
// is run by `go generate ./model`; a test fails when the checked-in file
// differs from what it writes.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/payrecon/payrecon/model"
)

func main() {
	out := flag.String("o", model.TransitionsFile, "the file to write")
	flag.Parse()
	if err := os.WriteFile(*out, model.Transitions(), 0o644); err != nil {
		log.Fatal(err)
	}
}
