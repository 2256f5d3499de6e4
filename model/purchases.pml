/*
 * Two purchases and a foreign payment, for spin: whose payment settles
 * whom.
 *
 * Purchases A and B, of one provider account, are each charged under
 * their own key. A third payment lives in another account (a connected
 * account of the platform, or another platform's) and its metadata names
 * A: the ids are the platform's to choose, and nothing stops another
 * account from holding a payment that names the same one. Every answer
 * about any of the three payments may reach either purchase: a search (in
 * the purchase's account, by the purchase id the payments' metadata
 * names, lagging behind new charges), a webhook (routed to either
 * purchase, from the account it happened in), and the audit's listing of
 * each account, which links a payment to the purchase it names when that
 * purchase knows no payment yet. Replies are lost; the worker reconciles
 * by status or search within an attempt budget. Every answer passes the
 * judge's identity rules. The purchases' states change only by move(),
 * which asserts the table generated from Go (transitions.pml).
 *
 * The properties: at most one charge per purchase; no move out of
 * succeeded, and only the table's moves; no purchase is ever settled by,
 * or linked to, a payment that is not its own; and the claim settles
 * (each purchase ends terminal or escalated), under weak fairness.
 * model/README.md explains what is modelled and what is left out.
 *
 * Lines marked MUTANT:name are replaced by the mutation tests.
 */
#include "transitions.pml"

#ifndef MAXATT
#define MAXATT 2    /* --max-attempts */
#endif
#ifndef LOSSES
#define LOSSES 2    /* replies lost */
#endif

#define NP 2        /* purchases A (0) and B (1) */

/* Payments: A's own and B's own in account 0; the foreign one in account 1, naming A. */
#define PAY_NONE 0
#define PAY_A    1
#define PAY_B    2
#define PAY_F    3
#define OWN(p)   ((p) + 1)
#define META(x)  ((x) == PAY_B -> 1 : 0)           /* the purchase its metadata names */
#define ACCT(x)  ((x) == PAY_F -> 1 : 0)           /* the account it lives in */
#define MYACCT   0                                 /* both purchases' account */

#define C_NONE 0
#define C_PROC 1
#define C_SUCC 2
#define C_DECL 3

#define O_SUCC    1
#define O_DECL    2
#define O_PEND    3
#define O_UNKNOWN 4

#define OUTCOME(c) ((c) == C_SUCC -> O_SUCC : ((c) == C_DECL -> O_DECL : O_PEND))
#define SETTLES(o) ((o) == O_SUCC -> SUCCEEDED : DECLINED)

#define V_APPLY  0
#define V_RECORD 1
#define V_ESC    2

/* ---- The books ---- */
byte pstate[NP];
byte payid[NP];     /* the payment the books give the purchase */
bit  esc[NP];       /* on the operator list */
byte checks[NP];    /* runs, saturating at MAXATT + 1 */

/* ---- The provider: one charge per payment ---- */
byte ch[4];         /* ch[x]: payment x's state; the foreign one exists from the start */
byte ncharges[NP];  /* charges made for payrecon's creates of each purchase */
bit  indexed[4];    /* search sees payment x */

byte losses = LOSSES;

hidden byte v;

inline move(p, f, t) {
	assert(pstate[p] == f);
	assert(f != SUCCEEDED);     /* no move out of succeeded */
	assert(ALLOWED(f, t));      /* only the table's moves */
	pstate[p] = t
}

/*
 * The judge's identity rules, then its state rules, for an answer about
 * payment x (outcome o), from account acct, reaching purchase p.
 */
inline judge(p, x, o, acct) {
	if
	:: x != PAY_NONE && acct != MYACCT -> v = V_ESC           /* another account's payment: foreign */ /* MUTANT:noaccount */
	:: x != PAY_NONE && META(x) != p -> v = V_ESC             /* names another purchase: foreign */ /* MUTANT:nometa */
	:: x != PAY_NONE && payid[1 - p] == x -> v = V_ESC         /* the books give it to the other: foreign */
	:: x != PAY_NONE && payid[p] != PAY_NONE && payid[p] != x && o != O_DECL -> v = V_ESC   /* a second payment */
	:: else ->
		if
		:: x != PAY_NONE && payid[p] != PAY_NONE && payid[p] != x -> v = V_RECORD   /* another payment, declined */
		:: pstate[p] == CREATED && x != PAY_NONE -> v = V_ESC  /* before submission: a contradiction */
		:: TERMINAL(pstate[p]) -> v = V_RECORD
		:: else -> v = V_APPLY
		fi
	fi
}

/* Record a payment id as the purchase's. */
inline link(p, x) {
	if
	:: payid[p] == PAY_NONE && x != PAY_NONE ->
		assert(x == OWN(p));    /* no purchase is ever settled by a payment that is not its own */
		payid[p] = x
	:: else
	fi
}

/* Apply an answer the judge let through: settle on a final outcome. */
inline apply(p, x, o) {
	link(p, x);
	if
	:: o == O_SUCC || o == O_DECL ->
		assert(x == OWN(p));    /* no purchase is ever settled by a payment that is not its own */
		if
		:: pstate[p] == UNCERTAIN -> move(p, UNCERTAIN, RECONCILING)
		:: else
		fi;
		move(p, pstate[p], SETTLES(o));
		esc[p] = 0
	:: else
	fi
}

/*
 * Purchase p's worker: the intent, then the create; after an unknown
 * outcome, a status query by the stored payment id, else a search in
 * the purchase's account by its id. One run per attempt; a run that
 * settles nothing spends one, and the last escalates.
 */
proctype Worker(byte p) {
	byte x, o;
end_worker:
	do
	:: atomic {
		!TERMINAL(pstate[p]) && !esc[p] ->
		if
		:: checks[p] <= MAXATT -> checks[p]++
		:: else
		fi;
		x = PAY_NONE; o = O_UNKNOWN;
		if
		:: pstate[p] == CREATED ->
			move(p, CREATED, SUBMITTED);
			/* the create under the purchase's key: the provider charges once */
			if
			:: ch[OWN(p)] == C_NONE ->
				ncharges[p]++;
				assert(ncharges[p] <= 1);     /* at most one charge per purchase */
				if
				:: ch[OWN(p)] = C_PROC
				:: ch[OWN(p)] = C_SUCC
				:: ch[OWN(p)] = C_DECL
				fi
			:: else
			fi;
			x = OWN(p); o = OUTCOME(ch[OWN(p)])
		:: pstate[p] == UNCERTAIN && payid[p] != PAY_NONE ->
			move(p, UNCERTAIN, RECONCILING);
			x = payid[p]; o = OUTCOME(ch[x])
		:: pstate[p] == UNCERTAIN && payid[p] == PAY_NONE ->
			move(p, UNCERTAIN, RECONCILING);
			/* search in its account: the indexed payments naming it */
			if
			:: indexed[OWN(p)] -> x = OWN(p)
			:: ACCT(PAY_F) == MYACCT && p == META(PAY_F) && ch[PAY_F] != C_NONE -> x = PAY_F   /* MUTANT:searchall */
			:: true -> x = PAY_NONE
			fi;
			if
			:: x != PAY_NONE -> o = OUTCOME(ch[x])
			:: else
			fi
		fi;
		if
		:: losses > 0 -> losses--; x = PAY_NONE; o = O_UNKNOWN   /* the reply is lost */
		:: true
		fi;
		judge(p, x, o, MYACCT);               /* an answer to a call on behalf of the purchase's account */
		if
		:: v == V_ESC -> esc[p] = 1
		:: v == V_APPLY -> apply(p, x, o)
		:: v == V_RECORD
		fi;
		if
		:: !TERMINAL(pstate[p]) && pstate[p] != UNCERTAIN -> move(p, pstate[p], UNCERTAIN)
		:: else
		fi;
		if
		:: !TERMINAL(pstate[p]) && checks[p] > MAXATT -> esc[p] = 1   /* attempts exhausted */ /* MUTANT:nolimit */
		:: else
		fi
	   }
	od
}

/* The provider: a processing charge settles; search catches up. */
active proctype Provider() {
end_provider:
	do
	:: atomic { ch[PAY_A] == C_PROC -> if :: ch[PAY_A] = C_SUCC :: ch[PAY_A] = C_DECL fi }
	:: atomic { ch[PAY_B] == C_PROC -> if :: ch[PAY_B] = C_SUCC :: ch[PAY_B] = C_DECL fi }
	:: atomic { ch[PAY_A] != C_NONE && !indexed[PAY_A] -> indexed[PAY_A] = 1 }
	:: atomic { ch[PAY_B] != C_NONE && !indexed[PAY_B] -> indexed[PAY_B] = 1 }
	od
}

/*
 * Webhooks: an event about any payment that exists reaches either
 * purchase, from the account the payment lives in (the inbox routes by
 * metadata or by the stored payment id; the model lets it reach both).
 */
inline deliver(p, x) {
	judge(p, x, OUTCOME(ch[x]), ACCT(x));
	if
	:: v == V_ESC -> esc[p] = 1
	:: v == V_APPLY ->
		if
		:: pstate[p] == UNCERTAIN || pstate[p] == RECONCILING || pstate[p] == SUBMITTED -> apply(p, x, OUTCOME(ch[x]))
		:: else
		fi
	:: v == V_RECORD
	fi
}

active proctype Webhooks() {
	byte p, x;
end_webhooks:
	do
	:: atomic {
		(ch[PAY_A] != C_NONE || ch[PAY_B] != C_NONE || ch[PAY_F] != C_NONE) ->
		if :: p = 0 :: p = 1 fi;
		if
		:: ch[PAY_A] != C_NONE -> x = PAY_A
		:: ch[PAY_B] != C_NONE -> x = PAY_B
		:: ch[PAY_F] != C_NONE -> x = PAY_F
		fi;
		deliver(p, x);
		p = 0; x = 0
	   }
	od
}

/*
 * The audit lists each account's payments and links one that took money
 * to the purchase it names, in that account, when the purchase knows no
 * payment yet and no other purchase owns it (a recovery's re-link writes
 * it as the purchase's payment id).
 */
active proctype Audit() {
	byte x;
end_audit:
	do
	:: atomic {
		(ch[PAY_A] == C_SUCC || ch[PAY_B] == C_SUCC || ch[PAY_F] == C_SUCC) ->
		if
		:: ch[PAY_A] == C_SUCC -> x = PAY_A
		:: ch[PAY_B] == C_SUCC -> x = PAY_B
		:: ch[PAY_F] == C_SUCC -> x = PAY_F
		fi;
		if
		:: ACCT(x) == MYACCT &&                                  /* MUTANT:auditaccount */
		   !TERMINAL(pstate[META(x)]) && pstate[META(x)] != CREATED && payid[1 - META(x)] != x -> link(META(x), x)
		:: else                                                 /* another account's money: a finding, no link */
		fi;
		x = 0
	   }
	od
}

init {
	atomic {
		/* the foreign payment: it may exist, and may be settled or processing */
		if
		:: skip
		:: ch[PAY_F] = C_SUCC
		:: ch[PAY_F] = C_PROC
		fi;
		run Worker(0);
		run Worker(1)
	}
}

#define DONE(p) (TERMINAL(pstate[p]) || esc[p])

/* Each purchase ends terminal or escalated; once true, it stays true. */
ltl settles { <> (DONE(0) && DONE(1)) }
