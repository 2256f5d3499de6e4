package model_test

// refundsModel is refunds.pml: two refunds of one payment, each its own
// process. Its liveness runs leave out crashes, whose only effect on
// progress is a lease left to expire: with them the fairness search takes
// minutes.
var refundsModel = spec{
	file:        "refunds.pml",
	claims:      []string{"settles0", "settles1"},
	nfair:       3,
	liveDefines: []string{"CRASHES=0"},
	machines:    []machine{{"rstate", "refund_transitions.pml", "assert(R_ALLOWED(f, t));"}},
}

// refundsMutants are refunds.pml's mutants.
var refundsMutants = []mutant{
	{
		file:  "refunds.pml",
		name:  "limit",
		what:  "store a refund whatever the payment's other refunds hold (the books' limit dropped)",
		lines: []string{"#define ROOM(i, j) (true)"},
		deep:  true,
		want:  []string{"the money returned never exceeds the charge"},
	},
	{
		file:  "refunds.pml",
		name:  "newkey",
		what:  "once the key can no longer be replayed, reconcile by a create under a new key instead of a listing",
		lines: []string{"\t\t\t\t:: else -> op = OP_CREATE; rkey[i] = rkey[i] + 2"},
		deep:  true,
		want:  []string{"a refund is never created twice for one intent"},
	},
	{
		file:  "refunds.pml",
		name:  "failunknown",
		what:  "an answer whose outcome is unknown (a timeout, a lost reply) settles the refund failed",
		lines: []string{"\t\t\t\t:: v == V_APPLY && (o == O_SUCC || o == O_FAIL || o == O_UNKNOWN) ->"},
		deep:  true,
		want:  []string{"never called failed while its outcome is unknown"},
	},
	{
		file:  "refunds.pml",
		name:  "overwrite",
		what:  "the judge applies an answer to a final refund as to an open one",
		lines: []string{"\t\t:: rstate[i] != R_CREATED ->"},
		deep:  true,
		want:  []string{"only the table's moves", "never called failed while its outcome is unknown"},
	},
	{
		file: "refunds.pml",
		name: "nolimit",
		what: "no attempt budget: a refund whose answers stay unknown is never escalated",
		lines: []string{
			"#define EXH(i) (false)",
			"\t\t\t\t\t:: false -> skip",
		},
		liveness: true,
		claim:    "settles0",
	},
}
