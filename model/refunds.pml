/*
 * payrecon's refunds of one payment, for spin.
 *
 * A succeeded payment of CHARGE units and two refunds of it, each its own
 * process with its own key, stored with its request at insert, when the
 * books' limit lets it in (the refunds of a payment, pending ones
 * included, never exceed it; a failed one does not count). Each refund's
 * job is claimed under a lease that expires and is fenced, by a worker of
 * its own, so that the two refunds run at once; a worker crashes at any
 * step, and its next claim takes over the dead run's expired lease. The provider keeps each key for a retention, makes a
 * refund pending, succeeded or failed, or refuses one for good, loses
 * replies, and does not check the payment's amount itself: the model
 * asks payrecon to keep the money within the charge on its own. Its
 * webhooks arrive duplicated, reordered and stale; one names a refund but
 * returns money from another payment. Every answer passes the refund
 * judge's rules. A refund's state changes only by rmove(), which asserts
 * the move is in the table generated from Go (refund_transitions.pml).
 *
 * The properties: the money returned never exceeds the charge; a refund
 * is never created twice for one intent; a refund is never called failed
 * while its outcome is unknown; and the claim settles (every refund
 * stored ends terminal or escalated), under weak fairness.
 * model/README.md explains what is modelled and what is left out.
 *
 * Lines marked MUTANT:name are replaced by the mutation tests.
 */
#include "refund_transitions.pml"

#ifndef LEASE
#define LEASE 1     /* a claim's lease, in ticks */
#endif
#ifndef MARGIN
#define MARGIN 2    /* --key-replay-margin: longer than a lease */
#endif
#ifndef RET
#define RET 4       /* the provider forgets a key this long after the first attempt */
#endif
#ifndef MAXATT
#define MAXATT 2    /* --max-attempts */
#endif
#ifndef CRASHES
#define CRASHES 1   /* worker crashes, each at any point of a run */
#endif

#define CHARGE 3    /* the payment's amount */
#define N 2         /* refunds */

#define E_NONE   0
#define E_SOFT   1  /* settles itself: attempts exhausted, key retention expired */
#define E_CHARGE 2  /* a refund may exist: a contradiction, a foreign refund */

/* The provider's refund under a key, and the outcomes of answers. */
#define P_NONE 0
#define P_PEND 1
#define P_SUCC 2
#define P_FAIL 3

#define O_SUCC     1
#define O_FAIL     2  /* failed, or refused for good: no money moved */
#define O_PEND     3
#define O_UNKNOWN  4  /* timeout, lost reply */
#define O_NOTFOUND 5  /* a listing that holds none */
#define O_RETRY    6  /* refused before acting: 429 */

#define SRC_CALL  0
#define SRC_EVENT 1

#define V_APPLY  0
#define V_RECORD 1
#define V_ESC    2

#define OUTCOME(p) ((p) == P_SUCC -> O_SUCC : ((p) == P_FAIL -> O_FAIL : O_PEND))
#define SETTLES(o) ((o) == O_SUCC -> R_SUCCEEDED : R_FAILED)
#define MOVES_MONEY(p) ((p) == P_PEND || (p) == P_SUCC)

/* ---- The books: the refunds' rows ---- */
byte amount[N];     /* chosen at the start */
bit  ins[N];        /* stored */
byte rstate[N];
byte esc[N];
bit  rpid[N];       /* the provider's refund id is known */
byte rkey[N];       /* the stored key: i + 1 */
byte fa_age[N];     /* ticks since the first attempt, saturating at RET */

/* ---- The jobs ---- */
bit  done[N];
bit  due[N];        /* the released job's run time has come: a tick after it was rescheduled */
byte owner[N];      /* 0 released, 1 or 2 a worker */
byte lease_left[N];
byte checks[N];     /* runs, saturating at MAXATT + 1 */
bit  inrun[N];      /* refund i's worker is inside a run */

/* ---- The provider ---- */
byte pst[N];        /* the refund made for refund i */
byte pkey[N];       /* the key the provider holds for refund i's refund, 0 none */
byte nref[N];       /* refunds made for refund i */
bit  refused[N];    /* the provider refuses refund i for good (the payment's reason) */
bit  ksaved[N];     /* the provider holds key i and its first response */
byte returned;      /* units the provider's refunds moved or may move */

/* ---- Webhooks ---- */
bit em_pend[N], em_succ[N], em_fail[N], em_other;

/* ---- Scratch, inside one atomic step ---- */
hidden byte v, vr, to;

byte crashes = CRASHES;

/* A running worker's live lease: time does not pass under it (the call's timeout ends before the lease does). */
#define BUSY(i) (lease_left[i] > 0 && inrun[i])
#define FENCED(me, i) (owner[i] == (me) && lease_left[i] > 0)
#define REPLAYABLE(i) (fa_age[i] < RET - MARGIN)
#define TERM(i) R_TERMINAL(rstate[i])
/* Runs beyond the budget that never reached the point of escalating. */
#define EXH(i) (!TERM(i) && esc[i] == E_NONE && checks[i] > MAXATT)   /* MUTANT:nolimit */

/* The one way a refund's state changes. */
inline rmove(i, f, t) {
	assert(rstate[i] == f);
	assert(R_ALLOWED(f, t));    /* only the table's moves */
	if
	:: t == R_FAILED ->
		assert(!MOVES_MONEY(pst[i]))  /* never called failed while its outcome is unknown */
	:: else
	fi;
	rstate[i] = t
}

inline mark(i, r) {
	if
	:: r != E_NONE && r > esc[i] -> esc[i] = r
	:: else
	fi
}

/*
 * The refund judge: what an answer (outcome o, about refund i's own
 * provider refund unless foreign) means for refund i as it is.
 */
inline judge(i, o, foreign) {
	vr = E_NONE;
	if
	:: foreign -> v = V_ESC; vr = E_CHARGE            /* another payment's refund */
	:: !foreign && (o == O_SUCC || o == O_FAIL || o == O_PEND) ->
		if
		:: rstate[i] == R_CREATED -> v = V_ESC; vr = E_CHARGE        /* contradiction */
		:: rstate[i] != R_CREATED && !TERM(i) -> v = V_APPLY       /* MUTANT:overwrite */
		:: TERM(i) && (o == O_PEND || SETTLES(o) == rstate[i]) -> v = V_RECORD
		:: TERM(i) && o != O_PEND && SETTLES(o) != rstate[i] -> v = V_ESC; vr = E_CHARGE
		fi
	:: !foreign && !(o == O_SUCC || o == O_FAIL || o == O_PEND) ->
		if
		:: TERM(i) -> v = V_RECORD
		:: else -> v = V_APPLY
		fi
	fi
}

/* settle: a final state; a reason that settles itself leaves the list. */
inline settle(i, t) {
	if
	:: rstate[i] == R_UNCERTAIN -> rmove(i, R_UNCERTAIN, R_RECONCILING)
	:: else
	fi;
	rmove(i, rstate[i], t);
	if
	:: esc[i] == E_SOFT -> esc[i] = E_NONE
	:: else
	fi
}

/* The provider makes refund i's refund under key k, or refuses it for good. */
inline make_refund(i, k) {
	if
	:: refused[i] -> skip
	:: !refused[i] && nref[i] == 0 -> refused[i] = 1          /* the payment's reason: nothing made */
	:: !refused[i] ->
		nref[i]++; pkey[i] = k;
		assert(nref[i] <= 1);                   /* a refund is never created twice for one intent */
		returned = returned + amount[i];
		assert(returned <= CHARGE);             /* the money returned never exceeds the charge */
		if
		:: pst[i] = P_PEND; em_pend[i] = 1
		:: pst[i] = P_SUCC; em_succ[i] = 1
		:: pst[i] = P_FAIL; em_fail[i] = 1; returned = returned - amount[i]
		fi
	fi
}

/* The provider's side of a create under key k for refund i; sets o. */
inline provider_create(i, k) {
	if
	:: o = O_RETRY                               /* refused before acting */
	:: o = O_UNKNOWN                             /* timed out before acting */
	:: skip ->
		if
		:: (refused[i] || (ksaved[i] && k == pkey[i])) && fa_age[i] < RET -> skip   /* the key's first response */
		:: else -> make_refund(i, k); ksaved[i] = !refused[i]   /* a key never seen, or forgotten */
		fi;
		if
		:: refused[i] -> o = O_FAIL
		:: !refused[i] -> o = OUTCOME(pst[i])
		:: o = O_UNKNOWN                         /* acted, reply lost */
		fi
	fi
}

/* A lookup by the provider's refund id, or a listing of the payment's refunds by metadata. */
inline provider_read(i) {
	if
	:: pst[i] != P_NONE -> o = OUTCOME(pst[i])
	:: pst[i] == P_NONE -> o = O_NOTFOUND
	fi;
	if
	:: skip
	:: o = O_UNKNOWN                             /* lost reply */
	fi
}

#define CRASHPOINT \
	if \
	:: crashes > 0 -> crashes--; END_RUN \
	:: true \
	fi

#define END_RUN inrun[i] = 0; o = 0; op = 0; took = 0; goto end_idle

/* Release the lease, the job due again later (RescheduleJob). */
#define RESCHEDULE(i) owner[i] = 0; lease_left[i] = 0; due[i] = 0

#define OP_CREATE 1
#define OP_READ   2

/*
 * Refund i's worker claims its job, then steps the refund as
 * Service.refundStep does: a step's read and its fenced write are one
 * action; a call and the applying of its answer are actions of their own.
 * Its lease token is its owner id me; a claim of a lease left by a run that
 * died takes it over.
 */
proctype Worker(byte i) {
	byte o, op;
	bit took;
	byte me = i + 1;
end_idle:
	do
	:: {
		atomic {
			ins[i] && !done[i] && ((owner[i] == 0 && due[i]) || (owner[i] != 0 && lease_left[i] == 0)) ->
			took = (owner[i] != 0);
			owner[i] = me; lease_left[i] = LEASE; inrun[i] = 1;
			if
			:: checks[i] <= MAXATT -> checks[i]++
			:: else
			fi;
			goto first
		};
step:
		atomic {
			CRASHPOINT;
first:
			op = 0; o = 0;
			if
			:: rstate[i] != R_SUBMITTED && rstate[i] != R_RECONCILING -> took = 0
			:: else
			fi;
			if
			:: !FENCED(me, i) -> END_RUN
			:: else
			fi;
			if
			:: EXH(i) -> esc[i] = E_SOFT; goto step    /* attempts exhausted */
			:: TERM(i) ->
				done[i] = 1; owner[i] = 0; lease_left[i] = 0; END_RUN
			:: rstate[i] == R_CREATED && esc[i] == E_CHARGE ->
				RESCHEDULE(i); END_RUN               /* hold: a refund may exist */
			:: rstate[i] == R_CREATED && esc[i] != E_CHARGE && !EXH(i) ->
				rmove(i, R_CREATED, R_SUBMITTED); fa_age[i] = 0; op = OP_CREATE
			:: rstate[i] == R_SUBMITTED && (took || esc[i] == E_CHARGE || !REPLAYABLE(i)) && !EXH(i) ->
				took = 0; rmove(i, R_SUBMITTED, R_UNCERTAIN); goto step
			:: rstate[i] == R_SUBMITTED && !took && esc[i] != E_CHARGE && REPLAYABLE(i) && !EXH(i) ->
				op = OP_CREATE                         /* resend the stored request */
			:: rstate[i] == R_RECONCILING && !EXH(i) ->
				took = 0; rmove(i, R_RECONCILING, R_UNCERTAIN); goto step
			:: rstate[i] == R_UNCERTAIN && !EXH(i) ->
				if
				:: rpid[i] -> op = OP_READ
				:: !rpid[i] && REPLAYABLE(i) && esc[i] != E_CHARGE -> op = OP_CREATE
				:: else -> op = OP_READ               /* MUTANT:newkey */
				fi;
				rmove(i, R_UNCERTAIN, R_RECONCILING)
			fi
		};
call:
		atomic {
			CRASHPOINT;
			if
			:: owner[i] == me && lease_left[i] > 0 ->
				if
				:: op == OP_CREATE -> provider_create(i, rkey[i])
				:: op == OP_READ -> provider_read(i)
				fi
			:: else -> END_RUN
			fi
		};
apply:
		atomic {
			CRASHPOINT;
			judge(i, o, 0);
			if
			:: !FENCED(me, i) ->
				/* lost the lease: recorded; an escalation still written */
				if
				:: v == V_ESC -> mark(i, vr)
				:: else
				fi;
				END_RUN
			:: FENCED(me, i) && TERM(i) ->
				/* another writer settled it during the call: judged against what won */
				if
				:: v == V_ESC -> mark(i, vr)
				:: else
				fi;
				goto step
			:: FENCED(me, i) && !TERM(i) ->
				if
				:: v == V_APPLY && o != O_UNKNOWN && o != O_RETRY && o != O_NOTFOUND -> rpid[i] = 1
				:: else
				fi;
				if
				:: v == V_APPLY && (o == O_SUCC || o == O_FAIL) ->     /* MUTANT:failunknown */
					settle(i, SETTLES(o)); done[i] = 1
				:: else ->
					to = R_UNCERTAIN;
					if
					:: v == V_APPLY && o == O_RETRY && rstate[i] == R_SUBMITTED && checks[i] < MAXATT -> to = R_SUBMITTED
					:: v == V_APPLY && op == OP_READ && o == O_NOTFOUND && !rpid[i] && !REPLAYABLE(i) -> vr = E_SOFT
					:: else
					fi;
					if
					:: to == R_UNCERTAIN && vr == E_NONE && checks[i] >= MAXATT -> vr = E_SOFT   /* MUTANT:nolimit */
					:: else
					fi;
					mark(i, vr);
					if
					:: to != rstate[i] -> rmove(i, rstate[i], to)
					:: else
					fi
				fi;
				RESCHEDULE(i); END_RUN
			fi
		}
	}
	od
}

/*
 * The shop asks for refund i: stored, with its key, only if the refunds
 * of the payment that did not fail, pending ones included, leave room.
 */
#define ROOM(i, j) ((ins[j] && rstate[j] != R_FAILED -> amount[j] : 0) + amount[i] <= CHARGE)  /* MUTANT:limit */

proctype Shop() {
end_shop:
	do
	:: atomic { !ins[0] && ROOM(0, 1) -> ins[0] = 1; rkey[0] = 1; due[0] = 1 }
	:: atomic { !ins[1] && ROOM(1, 0) -> ins[1] = 1; rkey[1] = 2; due[1] = 1 }
	od
}

/* Time: leases and first attempts age, rescheduled jobs come due, a pending refund settles. */
active proctype Clock() {
end_tick:
	do
	:: atomic {
		!BUSY(0) && !BUSY(1) ->
		due[0] = ins[0]; due[1] = ins[1];
		if :: lease_left[0] > 0 -> lease_left[0]-- :: else fi;
		if :: lease_left[1] > 0 -> lease_left[1]-- :: else fi;
		if :: rstate[0] != R_CREATED && fa_age[0] < RET -> fa_age[0]++ :: else fi;
		if :: rstate[1] != R_CREATED && fa_age[1] < RET -> fa_age[1]++ :: else fi;
		if
		:: pst[0] == P_PEND -> pst[0] = P_SUCC; em_succ[0] = 1
		:: pst[0] == P_PEND -> pst[0] = P_FAIL; em_fail[0] = 1; returned = returned - amount[0]
		:: pst[1] == P_PEND -> pst[1] = P_SUCC; em_succ[1] = 1
		:: pst[1] == P_PEND -> pst[1] = P_FAIL; em_fail[1] = 1; returned = returned - amount[1]
		:: true
		fi
	   }
	od
}

/*
 * A webhook applied through the inbox: outcome eo about refund i. The
 * inbox drops a duplicate; judging it again instead changes nothing the
 * judge has not already decided, so the model lets any event be applied
 * any number of times, which covers both.
 */
inline deliver(i, eo, foreign) {
	judge(i, eo, foreign);
	if
	:: v == V_ESC -> mark(i, vr)
	:: v == V_RECORD
	:: v == V_APPLY ->
		rpid[i] = 1;
		if
		:: eo == O_SUCC || eo == O_FAIL -> settle(i, SETTLES(eo)); done[i] = 1
		:: else
		fi
	fi
}

active proctype Webhooks() {
end_webhooks:
	do
	:: atomic { em_pend[0] -> deliver(0, O_PEND, 0) }
	:: atomic { em_succ[0] -> deliver(0, O_SUCC, 0) }
	:: atomic { em_fail[0] -> deliver(0, O_FAIL, 0) }
	:: atomic { em_pend[1] -> deliver(1, O_PEND, 0) }
	:: atomic { em_succ[1] -> deliver(1, O_SUCC, 0) }
	:: atomic { em_fail[1] -> deliver(1, O_FAIL, 0) }
	:: atomic { ins[0] && em_other -> deliver(0, O_SUCC, 1) }   /* another payment's refund naming refund 0 */
	od
}

init {
	assert(MARGIN > LEASE && MARGIN < RET);
	atomic {
		amount[0] = 2;
		if
		:: amount[1] = 1         /* both fit: two refunds at once */
		:: amount[1] = 2         /* the second fits only once the first failed */
		fi;
		if
		:: skip
		:: em_other = 1
		fi;
		run Shop();
		run Worker(0);
		run Worker(1)
	}
}

#define SETTLED(i) (!ins[i] || R_TERMINAL(rstate[i]) || esc[i] != E_NONE)

/*
 * Every refund stored ends terminal or escalated: one claim each, far
 * cheaper to search than one over both.
 */
ltl settles0 { [] (ins[0] -> <> SETTLED(0)) }
ltl settles1 { [] (ins[1] -> <> SETTLED(1)) }

