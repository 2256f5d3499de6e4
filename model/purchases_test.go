package model_test

// purchasesModel is purchases.pml: two purchases and a foreign payment.
var purchasesModel = spec{
	file:     "purchases.pml",
	claims:   []string{"settles"},
	nfair:    3,
	machines: []machine{{"pstate", "transitions.pml", "assert(ALLOWED(f, t));"}},
}

// purchasesMutants are purchases.pml's mutants: each lets an answer about
// one payment settle, or link, a purchase it does not belong to.
var purchasesMutants = []mutant{
	{
		file:  "purchases.pml",
		name:  "noaccount",
		what:  "the judge ignores the account an answer comes from",
		lines: []string{"\t:: false -> skip"},
		want:  []string{"no purchase is ever settled by a payment that is not its own"},
	},
	{
		file:  "purchases.pml",
		name:  "nometa",
		what:  "the judge ignores the purchase the payment's metadata names",
		lines: []string{"\t:: false -> skip"},
		want:  []string{"no purchase is ever settled by a payment that is not its own"},
	},
	{
		file:  "purchases.pml",
		name:  "searchall",
		what:  "the search for a purchase reads every account, not the purchase's own",
		lines: []string{"\t\t\t:: p == META(PAY_F) && ch[PAY_F] != C_NONE -> x = PAY_F"},
		want:  []string{"no purchase is ever settled by a payment that is not its own"},
	},
	{
		file: "purchases.pml",
		name: "auditaccount",
		what: "the audit links a payment to the purchase it names whatever account it lists it in",
		lines: []string{
			"\t\t:: true &&",
		},
		want: []string{"no purchase is ever settled by a payment that is not its own"},
	},
	{
		file:     "purchases.pml",
		name:     "nolimit",
		what:     "no attempt budget: a purchase whose answers stay unknown is never escalated",
		lines:    []string{"\t\t:: false -> skip"},
		liveness: true,
		claim:    "settles",
	},
}
