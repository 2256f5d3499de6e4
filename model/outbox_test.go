package model_test

// outboxModel is outbox.pml: the outbox and its relay. Its liveness run
// spends one crash, one stall and one lost answer instead of two each:
// with two the fairness search takes minutes.
var outboxModel = spec{
	file:        "outbox.pml",
	claims:      []string{"delivered"},
	nfair:       3,
	liveDefines: []string{"CRASHES=1", "STALLS=1", "LOST=1"},
}

// outboxMutants are outbox.pml's mutants.
var outboxMutants = []mutant{
	{
		file: "outbox.pml",
		name: "outside",
		what: "write the event before the change's transaction commits, so that a writer dying in between leaves the event",
		lines: []string{
			"\t\tnev[p]++ }; atomic { if :: true :: changes[p]--; goto end_writer fi;",
		},
		deep: true,
		want: []string{"no event is delivered that was not committed"},
	},
	{
		file:  "outbox.pml",
		name:  "noorder",
		what:  "send any undelivered event of a purchase, not only the one after the last acknowledged",
		lines: []string{"\t\t\tif :: acked[p] + 1 < nev[p] -> k = acked[p] + 2 :: true -> k = acked[p] + 1 fi"},
		deep:  true,
		want:  []string{"deliveries of one purchase arrive in sequence order"},
	},
	{
		file:     "outbox.pml",
		name:     "notakeover",
		what:     "never take over a delivery whose relay died holding its lease",
		lines:    []string{"#define DUE(p) (acked[p] < nev[p] && owner[p] == 0)"},
		liveness: true,
		claim:    "delivered",
	},
}
