// Command gen writes the model's include files (model.Files): each
// machine's states and allowed moves for the Promela models, from package
// statemachine. It is run by `go generate ./model`, in the model's
// directory; a test fails when a checked-in file differs from what it
// writes.
package main

import (
	"log"
	"os"

	"github.com/payrecon/payrecon/model"
)

func main() {
	for _, g := range model.Files {
		if err := os.WriteFile(g.File, g.Text(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
