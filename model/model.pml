/*
 * payrecon's protocol for one purchase, for spin.
 *
 * Two workers claim the purchase's job under leases that expire and are
 * fenced, and crash at any step; a provider keeps idempotency keys for a
 * retention, loses replies and answers searches late; webhooks arrive
 * duplicated, reordered and stale; another system's payment may name the
 * purchase; an operator resolves escalated cases; every answer passes the
 * judge's rules. The purchase's state changes only by move(), which
 * asserts that the move is in the table generated from Go
 * (transitions.pml).
 *
 * The properties: the assertions (at most one charge per purchase, no move
 * out of succeeded, only the table's moves, never a create after the
 * retention minus the margin, never a new key), checked in every state,
 * and the claim settles (every run ends terminal or escalated), checked
 * under weak fairness. model/README.md explains what is modelled and
 * what is left out; model_test.go runs spin.
 *
 * Lines marked MUTANT:name are replaced by the mutation tests.
 */
#include "transitions.pml"

/*
 * Time is counted in ticks. The settings keep their order in payrecon (a
 * lease shorter than the replay margin, the margin shorter than the key
 * retention) and may be overridden with spin -D.
 */
#ifndef LEASE
#define LEASE 2     /* a claim's lease, in ticks */
#endif
#ifndef MARGIN
#define MARGIN 3    /* --key-replay-margin: longer than a lease */
#endif
#ifndef RET
#define RET 6       /* --key-retention: the provider forgets a key this long after the first attempt */
#endif
#ifndef MAXATT
#define MAXATT 2    /* --max-attempts */
#endif
#ifndef CRASHES
#define CRASHES 2   /* worker crashes, each at any point of a run */
#endif
#ifndef STALLS
#define STALLS 2    /* ticks that pass while a running worker holds a live lease */
#endif
#ifndef OPS
#define OPS 2       /* operator resolutions */
#endif

/* The first attempt's age saturates at RET: past it, the provider has forgotten the key. */
#define FA_MAX RET

/* Escalation, by rank (markEscalated keeps the weightier reason). */
#define E_NONE   0
#define E_SOFT   1  /* settles itself: attempts exhausted, key retention expired */
#define E_CHARGE 2  /* a charge may exist: contradiction, state disagreement, foreign payment, duplicate charge */

/* The provider's charge, and the outcomes of its answers. */
#define C_NONE 0
#define C_PROC 1
#define C_SUCC 2
#define C_DECL 3

#define O_NONE     0
#define O_SUCC     1
#define O_DECL     2
#define O_PEND     3  /* processing, or a key in use */
#define O_UNKNOWN  4  /* timeout, lost reply */
#define O_NOTFOUND 5  /* a search that found nothing */
#define O_RETRY    6  /* refused before acting: 429, connection refused */

/* The payments an answer can name. */
#define PAY_NONE 0
#define PAY_OWN  1  /* the charge made under the purchase's key */
#define PAY_DUP  2  /* another payment whose metadata names the purchase */
#define PAY_FOR  3  /* a payment the books give to another purchase */

/* Where an answer comes from. */
#define SRC_CREATE 0
#define SRC_REPLAY 1
#define SRC_STATUS 2
#define SRC_SEARCH 3
#define SRC_EVENT  4
#define SRC_OPER   5
#define CURRENT(src) ((src) == SRC_STATUS || (src) == SRC_OPER)

/* Verdicts. */
#define V_APPLY   0
#define V_RECORD  1
#define V_ESC     2
#define V_CONFIRM 3

#define OPER 3      /* the operator's lease owner id; workers are 1 and 2 */
#define KEY  1      /* the purchase's one idempotency key, payrecon-<id> */

#define OUTCOME(c) ((c) == C_SUCC -> O_SUCC : ((c) == C_DECL -> O_DECL : O_PEND))
#define SETTLES(o) ((o) == O_SUCC -> SUCCEEDED : ((o) == O_DECL -> DECLINED : 255))

/* ---- The books: the purchase row ---- */
byte pstate = CREATED;
byte esc = E_NONE;
byte doubt = 0;     /* answers contradicting a final state not yet confirmed, saturating at 2 */
byte payid = PAY_NONE;
byte pkey = 0;      /* the stored idempotency key */
byte fa_age = 0;    /* ticks since the first attempt's intent, saturating at FA_MAX */
bit  decl_early;    /* the charge declined before the purchase was settled succeeded */

/* ---- The job ---- */
bit  done = 0;
byte owner = 0;     /* the lease's owner and token: 0 released, 1 or 2 a worker, OPER the operator */
byte lease_left = 0;/* ticks to the lease's expiry; 0: expired */
byte checks = 0;    /* runs of the job, saturating at MAXATT + 1 */
bit  inrun[3];       /* inrun[w]: worker w is alive and inside a run */

/* ---- The provider ---- */
byte ch = C_NONE;   /* the charge under the purchase's key */
byte ncharges = 0;  /* charges the provider made for payrecon's creates of the purchase */
bit  ksaved = 0;    /* the provider holds the key and its saved first response */
byte kresp = C_NONE;/* the saved first response */
bit  indexed = 0;   /* search sees the charge (it lags) */
byte other = PAY_NONE; /* another system's payment that names the purchase (PAY_DUP, succeeded), or one the books give to another purchase (PAY_FOR) */

/* ---- Webhooks: emitted, and committed to the inbox ---- */
bit em_proc, em_succ, em_decl, em_other;
bit in_proc, in_succ, in_decl, in_other;

/* ---- Scratch: used only inside one atomic step, so not part of the state ---- */
hidden byte v, vr;  /* the judge's verdict and its escalation reason */
hidden byte src;    /* the answer's source */
hidden byte to;     /* the state a decision moves to; in decideDoubt, whether the doubt is answered */
hidden byte late;   /* the answer lost a race: the purchase moved while it was out */

/* ---- Budgets ---- */
byte crashes = CRASHES;
byte stalls = STALLS;
byte opsleft = OPS;

/* A running worker's live lease: time passes under it only as a stall. */
#define BUSY (lease_left > 0 && (owner == 1 || owner == 2) && inrun[owner])

/*
 * The lease check in every write (CheckLease): owner, token, expiry. Every
 * claim replaces the owner, so owner stands for the (owner, fencing token)
 * pair: a worker's claim is current until the next claim, and a worker's
 * older claims died with their runs.
 */
#define FENCED(me) (owner == (me) && lease_left > 0)  /* MUTANT:nofence */

/* keyReplayable: the provider still certainly keeps the key. */
#define REPLAYABLE (pkey == KEY && fa_age < RET - MARGIN)

/* The one way a purchase's state changes. */
inline move(f, t) {
	assert(pstate == f);
	assert(f != SUCCEEDED);     /* no move out of succeeded */
	assert(ALLOWED(f, t));      /* only the table's moves */
	pstate = t
}

/* markEscalated */
inline mark(r) {
	if
	:: r != E_NONE && (esc == E_NONE || r > esc) -> esc = r
	:: else
	fi
}

/* Release the lease (RescheduleJob, CompleteJob). */
inline release() {
	owner = 0;
	lease_left = 0
}

/*
 * Judge: what an answer (outcome o, naming payment py, with charges nc
 * taking money, from source src) means for a purchase in state ps. late:
 * for a decline against succeeded, the answer is older than the success.
 * Sets v and vr.
 */
inline judge(ps, o, py, nc, src, late) {
	vr = E_NONE;
	if
	:: py == PAY_FOR ->
		v = V_ESC; vr = E_CHARGE        /* foreign_payment */
	:: py != PAY_FOR && py != PAY_NONE && payid != PAY_NONE && py != payid && o == O_DECL ->
		v = V_RECORD                    /* another payment, declined: no money */
	:: py != PAY_FOR && py != PAY_NONE && payid != PAY_NONE && py != payid && o != O_DECL ->
		v = V_ESC; vr = E_CHARGE        /* duplicate_charge */
	:: (py == PAY_NONE || payid == PAY_NONE || py == payid) && py != PAY_FOR && nc > 1 ->
		v = V_ESC; vr = E_CHARGE        /* duplicate_charge: a search found two */
	:: else ->
		if
		:: o == O_SUCC || o == O_DECL || o == O_PEND ->
			if
			:: ps == CREATED ->
				v = V_ESC; vr = E_CHARGE        /* contradiction */
			:: ps != CREATED && !TERMINAL(ps) ->   /* MUTANT:overwrite */
				v = V_APPLY
			:: TERMINAL(ps) && (o == O_PEND || SETTLES(o) == ps) ->
				v = V_RECORD                    /* a final state is never overwritten */
			:: TERMINAL(ps) && o != O_PEND && SETTLES(o) != ps && CURRENT(src) ->
				v = V_ESC; vr = E_CHARGE        /* state_disagreement */
			:: TERMINAL(ps) && o == O_DECL && ps == SUCCEEDED && !CURRENT(src) && late ->
				v = V_RECORD                    /* a stale decline */
			:: TERMINAL(ps) && o != O_PEND && SETTLES(o) != ps && !CURRENT(src) && !(o == O_DECL && late) ->
				v = V_CONFIRM                   /* confirm with a status query */
			fi
		:: else ->
			if
			:: TERMINAL(ps) -> v = V_RECORD
			:: else -> v = V_APPLY              /* the outcome stays open */
			fi
		fi
	fi
}

/* doubt(): a final purchase is contradicted; the job reopens to confirm. */
inline raise_doubt(py) {
	if
	:: doubt < 2 -> doubt++
	:: else
	fi;
	if
	:: payid == PAY_NONE -> payid = py
	:: else
	fi;
	done = 0
}

/* applyLateVerdict: what a verdict on an answer that lost a race asks of the purchase as it is. */
inline late_verdict(py) {
	if
	:: v == V_ESC -> mark(vr)
	:: v == V_CONFIRM && TERMINAL(pstate) -> raise_doubt(py)
	:: else
	fi
}

/* An escalation leaves the list only as the purchase settles. */
inline clear_escalation() {
	assert(TERMINAL(pstate));
	esc = E_NONE
}

/* settle(): move to a final state; a reason that settles itself leaves the list. */
inline settle(t) {
	move(pstate, t);
	if
	:: esc == E_SOFT -> clear_escalation()
	:: else
	fi
}

/*
 * The provider's side of a call op (create, status, search) from a live
 * lease. Sets o (outcome), py (payment named), nc (charges taking money).
 */
#define OP_CREATE 0
#define OP_STATUS 1
#define OP_SEARCH 2

inline provider_create(k) {
	if
	:: o = O_RETRY                              /* refused before acting */
	:: o = O_UNKNOWN                            /* timed out before acting */
	:: skip ->                                  /* acted */
	   if
	   :: k == KEY && ksaved && fa_age < RET -> skip   /* the key's saved first response */
	   :: else ->                               /* a key never seen, or forgotten: a charge */
		ncharges++;
		assert(ncharges <= 1);                  /* at most one charge per purchase */
		if
		:: ch = C_PROC; em_proc = 1
		:: ch = C_SUCC; em_succ = 1
		:: ch = C_DECL; em_decl = 1
		fi;
		ksaved = 1; kresp = ch
	   fi;
	   if
	   :: o = OUTCOME(kresp); py = PAY_OWN; nc = 1
	   :: o = O_UNKNOWN                         /* acted, reply lost */
	   fi
	fi;
	assert(k == KEY);                           /* never a new key */
	assert(fa_age < RET - MARGIN + LEASE - 1)   /* never a create after the retention minus the margin */ /* MUTANT:replay */
}

inline provider_status(p) {
	if
	:: p == PAY_OWN -> o = OUTCOME(ch); py = PAY_OWN; nc = 1
	:: p == PAY_DUP -> o = O_SUCC; py = PAY_DUP; nc = 1
	fi;
	if
	:: skip
	:: o = O_UNKNOWN; py = PAY_NONE; nc = 0     /* lost reply */
	fi
}

inline provider_search() {
	nc = (indexed && ch != C_DECL) + (other == PAY_DUP);
	if
	:: indexed -> o = OUTCOME(ch); py = PAY_OWN
	:: !indexed && other == PAY_DUP -> o = O_SUCC; py = PAY_DUP
	:: !indexed && other != PAY_DUP -> o = O_NOTFOUND; py = PAY_NONE; nc = 0
	fi;
	if
	:: skip
	:: o = O_UNKNOWN; py = PAY_NONE; nc = 0     /* lost reply */
	fi
}

/* Runs beyond the budget that never reached the point of escalating. */
#define EXHAUSTED (!TERMINAL(pstate) && esc == E_NONE && checks > MAXATT)   /* MUTANT:nolimit */

/*
 * A crash point, at the start of every action of a run but the first: the
 * worker may die there (within the crash budget), losing what it held in
 * memory; its lease stays until it expires. It restarts idle.
 */
#define CRASHPOINT \
	if \
	:: crashes > 0 -> crashes--; END_RUN \
	:: true \
	fi

/* The run is over, or stopped (the lease, if still held, then expires): the worker is idle. */
#define END_RUN inrun[me] = 0; forget(); took = 0; goto end_idle

/* A step forgets the last one's call and answer. */
inline forget() {
	op = 0; before = 0; o = 0; py = 0; nc = 0; rdoubt = 0
}

/*
 * A worker claims the job, then steps the purchase as
 * reconcile.Service.step does. A step reads the purchase and makes its
 * fenced, conditional write in one action: a write conditional on the
 * version read is linearizable at its commit, and a conflict only makes
 * the worker read again. The claim's read serves the first step, as in
 * the code. A provider call and the applying of its answer are actions of
 * their own, so anything may happen between them: a crash, a webhook, a
 * tick. Worker 2 claims only while worker 1 is inside a run: two idle
 * workers are interchangeable, and the model need not explore both orders.
 */
proctype Worker(byte me) {
	byte rdoubt;                  /* the purchase's doubt as the step read it */
	bit took;                     /* the claim took over an expired lease */
	byte op, before;              /* the step's call, and the state it left the purchase in */
	byte o, py, nc;               /* the call's answer */
end_idle:
	do
	:: {
		atomic {
			!done && (owner == 0 || lease_left == 0) && (me == 1 || inrun[1]) ->
			took = (owner != 0);
			owner = me; lease_left = LEASE; inrun[me] = 1;
			if
			:: checks <= MAXATT -> checks++
			:: else
			fi;
			goto first                        /* the claim's read serves the first step */
		};
step:
		atomic {
			CRASHPOINT;
first:
			forget();
			if
			:: pstate != SUBMITTED && pstate != RECONCILING -> took = 0
			:: else
			fi;
			if
			:: !FENCED(me) -> END_RUN     /* every step writes or calls under the lease */
			:: else
			fi;
			if
			:: EXHAUSTED ->
				/* escalateOnly: attempts exhausted before an answer was applied */
				esc = E_SOFT; goto step
			:: TERMINAL(pstate) && doubt > 0 ->
				/* confirm: a status query (or a search) about a contradicted final state */
				before = pstate; rdoubt = doubt;
				if
				:: payid != PAY_NONE -> op = OP_STATUS
				:: else -> op = OP_SEARCH
				fi
			:: TERMINAL(pstate) && doubt == 0 ->
				/* finishJob */
				done = 1; release(); END_RUN
			:: pstate == CREATED && esc == E_CHARGE ->
				/* hold: never a create over a charge that may exist */
				release(); END_RUN
			:: pstate == CREATED && esc != E_CHARGE && !EXHAUSTED ->
				/* submitIntent: store the request and the key; only then call */
				move(CREATED, SUBMITTED);
				assert(pkey == 0);
				pkey = KEY; fa_age = 0;
				before = SUBMITTED; op = OP_CREATE
			:: pstate == SUBMITTED && took && !EXHAUSTED ->
				/* the previous worker died or stalled mid-call: never a new key, reconcile */
				took = 0; move(SUBMITTED, UNCERTAIN); goto step
			:: pstate == SUBMITTED && !took && esc == E_CHARGE ->
				/* a charge may exist: no create is resent */
				move(SUBMITTED, UNCERTAIN); goto step
			:: pstate == SUBMITTED && !took && esc != E_CHARGE && !EXHAUSTED ->
				/* a clean lease: the provider refused before acting; resend the stored request */
				if
				:: !REPLAYABLE -> move(SUBMITTED, UNCERTAIN); goto step
				:: else -> before = SUBMITTED; op = OP_CREATE
				fi
			:: pstate == RECONCILING && !EXHAUSTED ->
				/* only a lost lease leaves it reconciling */
				took = 0; move(RECONCILING, UNCERTAIN); goto step
			:: pstate == UNCERTAIN && !EXHAUSTED ->
				/* reconcileIntent: by status, else a replay of the same key while kept, else a search */
				if
				:: payid != PAY_NONE -> op = OP_STATUS
				:: payid == PAY_NONE && REPLAYABLE && esc != E_CHARGE -> op = OP_CREATE   /* MUTANT:replay */
				:: else -> op = OP_SEARCH                  /* MUTANT:newkey */
				fi;
				move(UNCERTAIN, RECONCILING);
				before = RECONCILING
			fi
		};

call:
		/* The call is sent only while the lease holds: its timeout ends before the lease does. */
		atomic {
			CRASHPOINT;
			if
			:: owner == me && lease_left > 0 ->   /* MUTANT:nofence */
				if
				:: op == OP_CREATE -> provider_create(pkey)
				:: op == OP_STATUS -> provider_status(payid)
				:: op == OP_SEARCH -> provider_search()
				fi
			:: else -> END_RUN
			fi
		};

		/* apply: judge the answer against the purchase as it now is, in one fenced transaction */
		atomic {
			CRASHPOINT;
			if
			:: op == OP_CREATE && before == SUBMITTED -> src = SRC_CREATE
			:: op == OP_CREATE && before != SUBMITTED -> src = SRC_REPLAY
			:: op == OP_STATUS -> src = SRC_STATUS
			:: op == OP_SEARCH -> src = SRC_SEARCH
			fi;
			late = (pstate != before);
			judge(pstate, o, py, nc, src, late);
			if
			:: !FENCED(me) ->
				/* applyLate: recorded unapplied; an escalation or a doubt is still written */
				if
				:: TERMINAL(pstate) || v == V_ESC -> late_verdict(py)
				:: else
				fi;
				END_RUN
			:: FENCED(me) && late ->
				/* another writer moved it during the call: judged against what won */
				late_verdict(py);
				goto step
			:: FENCED(me) && !late && TERMINAL(pstate) ->
				/* decideDoubt */
				if
				:: v == V_CONFIRM && payid == PAY_NONE -> payid = py
				:: else
				fi;
				if
				:: v == V_ESC -> mark(vr); to = 1
				:: v == V_RECORD && (o == O_SUCC || o == O_DECL) -> to = 1
				:: !(v == V_ESC) && !(v == V_RECORD && (o == O_SUCC || o == O_DECL)) && checks >= MAXATT ->
					mark(E_CHARGE); to = 1
				:: else -> to = 0
				fi;
				if
				:: doubt == rdoubt && to == 1 -> doubt = 0; done = 1
				:: else
				fi;
				release(); END_RUN
			:: FENCED(me) && !late && !TERMINAL(pstate) ->
				/* decide */
				vr = (v == V_ESC -> vr : E_NONE);
				if
				:: v == V_APPLY && py != PAY_NONE && payid == PAY_NONE -> payid = py
				:: else
				fi;
				if
				:: v == V_APPLY && (o == O_SUCC || o == O_DECL) ->
					settle(SETTLES(o)); done = 1
				:: else ->
					to = UNCERTAIN;
					if
					:: v == V_APPLY && o == O_RETRY && pstate == SUBMITTED && checks < MAXATT ->
						to = SUBMITTED
					:: v == V_APPLY && op == OP_SEARCH && o == O_NOTFOUND && !REPLAYABLE ->
						vr = E_SOFT                     /* key_retention_expired */
					:: else
					fi;
					if
					:: to == UNCERTAIN && vr == E_NONE && checks >= MAXATT -> vr = E_SOFT   /* MUTANT:nolimit */
					:: else
					fi;
					mark(vr);
					if
					:: to != pstate -> move(pstate, to)
					:: else
					fi
				fi;
				release(); END_RUN
			fi
		};
	}
	od
}

/*
 * Time: a tick ages the lease and the first attempt, and lets the provider
 * progress: search catches up with a charge made before the tick (it
 * lags), and a processing charge may settle. Time passes under a running
 * owner's live lease only as a stall.
 */
active proctype Clock() {
end_tick:
	do
	:: atomic {
		(!BUSY || stalls > 0) ->
		if
		:: BUSY -> stalls--
		:: else
		fi;
		if
		:: lease_left > 0 -> lease_left--
		:: else
		fi;
		if
		:: pkey != 0 && fa_age < FA_MAX -> fa_age++
		:: else
		fi;
		if
		:: ch != C_NONE -> indexed = 1
		:: else
		fi;
		if
		:: ch == C_PROC -> ch = C_SUCC; em_succ = 1
		:: ch == C_PROC -> ch = C_DECL; em_decl = 1
		:: true
		fi
	   }
	od
}


/*
 * An event applied through the inbox (applyToPurchase): outcome eo about
 * payment ep. A duplicate changes nothing.
 */
inline deliver(inb, eo, ep) {
	if
	:: inb -> skip                      /* duplicate */
	:: else ->
		inb = 1;
		judge(pstate, eo, ep, 1, SRC_EVENT, decl_early);
		if
		:: v == V_ESC -> mark(vr)
		:: v == V_CONFIRM -> raise_doubt(ep)
		:: v == V_RECORD
		:: v == V_APPLY ->
			if
			:: payid == PAY_NONE -> payid = ep
			:: else
			fi;
			if
			:: eo == O_SUCC || eo == O_DECL ->
				if
				:: pstate == UNCERTAIN -> move(UNCERTAIN, RECONCILING)
				:: else
				fi;
				settle(SETTLES(eo))
			:: else
			fi
		fi
	fi
}

/* Webhook deliveries: any emitted event, any number of times, in any order, at any time. */
active proctype Webhooks() {
end_webhooks:
	do
	:: atomic { em_proc -> deliver(in_proc, O_PEND, PAY_OWN) }
	:: atomic { em_succ -> deliver(in_succ, O_SUCC, PAY_OWN) }
	:: atomic { em_decl -> deliver(in_decl, O_DECL, PAY_OWN) }
	:: atomic { em_other -> deliver(in_other, O_SUCC, other) }
	od
}

/*
 * The operator resolves an escalated purchase (reconcile.Service.Resolve):
 * takes the job's lease, fetches the provider's live view, and settles the
 * purchase only if the judge finds that the view does not contradict the
 * outcome asked for (no override). The operator passes the version it was
 * shown, so anything that changes the purchase between the live view and
 * the commit refuses the resolution; the model therefore takes the lease,
 * the view and the commit as one action. A refused resolution gives the
 * job back, its lease released.
 */
#define RESOLVABLE (!TERMINAL(pstate) && esc != E_NONE && !(pstate == CREATED && esc != E_CHARGE))

active proctype Operator() {
	byte want, o, py, nc;
end_operator:
	do
	:: atomic {
		opsleft > 0 && RESOLVABLE && !done && (owner == 0 || lease_left == 0) ->
		opsleft--;
		if
		:: checks <= MAXATT -> checks++
		:: else
		fi;
		if
		:: want = SUCCEEDED
		:: want = DECLINED
		fi;
		if
		:: payid != PAY_NONE -> provider_status(payid)
		:: else -> provider_search()
		fi;
		judge(want, o, py, nc, SRC_OPER, 0);
		if
		:: v == V_ESC || v == V_CONFIRM || (want == DECLINED && o == O_PEND) ->
			skip                                /* refused */
		:: else ->
			if
			:: pstate == UNCERTAIN -> move(UNCERTAIN, RECONCILING)
			:: pstate == CREATED -> move(CREATED, SUBMITTED)
			:: else
			fi;
			move(pstate, want);
			if
			:: want == SUCCEEDED && v == V_RECORD && py != PAY_NONE && payid == PAY_NONE -> payid = py
			:: else
			fi;
			clear_escalation(); doubt = 0; decl_early = (want == SUCCEEDED && ch == C_DECL);
			done = 1
		fi;
		release();
		want = 0; o = 0; py = 0; nc = 0
	   }
	od
}

init {
	assert(MARGIN > LEASE && MARGIN < RET);
	atomic {
		/* another system's payment that names the purchase may exist; its event arrives at any time */
		if
		:: skip
		:: other = PAY_FOR; em_other = 1
		:: other = PAY_DUP; em_other = 1
		fi;
		run Worker(1);
		run Worker(2)
	}
}

/*
 * Every run ends terminal or escalated. Once true this stays true (no move
 * leaves a final state, and an escalation is cleared only by a move to
 * one: see clear_escalation), so <> is <>[] here, and the search need not
 * follow a run past the point where it holds.
 */
ltl settles { <> (TERMINAL(pstate) || esc != E_NONE) }
