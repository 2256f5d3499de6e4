/*
 * payrecon's outbox and its relay, for spin.
 *
 * Two purchases change (purchase 0 three times, purchase 1 once); each change
 * commits with its event, numbered in the purchase's sequence, in one
 * transaction, or not at all when its writer dies before the commit. Two
 * relays deliver the events to one subscription: each claims a
 * purchase's next delivery under a lease that expires and fences its
 * acknowledgement, POSTs it, and records the 2xx. The receiver is down
 * for a while, a 2xx is lost on the way back, a relay crashes at any step
 * or stalls past its lease, and the next claim sends the event again.
 *
 * The properties: no event is delivered that was not committed;
 * deliveries of one purchase arrive in sequence order (a repeat of an
 * event already received is allowed: at least once); and the claim
 * delivered: every committed change is delivered at least once, under
 * weak fairness. model/README.md explains what is modelled and what is
 * left out.
 *
 * Lines marked MUTANT:name are replaced by the mutation tests.
 */

#ifndef LEASE
#define LEASE 1     /* a delivery's lease, in ticks */
#endif
#ifndef CRASHES
#define CRASHES 2   /* relay crashes, each at any step */
#endif
#ifndef STALLS
#define STALLS 2    /* ticks that pass while a relay holds a live lease */
#endif
#ifndef DOWN
#define DOWN 2      /* POSTs the receiver fails (down, 5xx, timeout) */
#endif
#ifndef LOST
#define LOST 2      /* 2xx answers lost on the way back */
#endif

#define P 2         /* purchases */

/* ---- The books: changes and their events ---- */
byte changes[P];    /* changes asked for: purchase 0 three, purchase 1 one */
byte committed[P];  /* changes committed */
byte nev[P];        /* events in the outbox, numbered 1..nev */

/* ---- The deliveries: one subscription ---- */
byte acked[P];      /* events the relay recorded delivered, in order */
byte owner[P];      /* the lease on the purchase's next delivery: 0 none, 1 or 2 a relay */
byte lease_left[P];
bit  inrun[3];      /* relay r is inside a delivery */
byte cur[3];        /* the purchase relay r delivers */

/* ---- The receiver ---- */
byte got[P];        /* the highest event of each purchase received */

byte crashes = CRASHES;
byte stalls = STALLS;
byte down = DOWN;
byte lost = LOST;

/*
 * A change and its event, in one transaction: the event's number is the
 * purchase's next. A writer that dies before the commit leaves neither.
 */
proctype Writer(byte p) {
end_writer:
	do
	:: atomic { committed[p] < changes[p] ->
		nev[p]++;                        /* MUTANT:outside */
		committed[p]++ }
	:: atomic { committed[p] < changes[p] -> changes[p]-- }   /* dies before the commit: nothing */
	od
}

/* A purchase's next delivery can be claimed: an event waits, and no live lease holds it. */
#define DUE(p) (acked[p] < nev[p] && (owner[p] == 0 || lease_left[p] == 0))   /* MUTANT:notakeover */

#define BUSY(p) (lease_left[p] > 0 && owner[p] != 0 && inrun[owner[p]] && cur[owner[p]] == (p))
#define FENCED(me, p) (owner[p] == (me) && lease_left[p] > 0)

#define CRASHPOINT \
	if \
	:: crashes > 0 -> crashes--; inrun[me] = 0; k = 0; goto end_idle \
	:: true \
	fi

/*
 * A relay claims the next delivery of a purchase (event acked + 1, once
 * committed), POSTs it, and records the 2xx under its lease. Relay 2
 * claims only while relay 1 delivers: two idle relays are alike.
 */
proctype Relay(byte me) {
	byte p, k;
end_idle:
	do
	:: {
		atomic {
			(me == 1 || inrun[1]) && (DUE(0) || DUE(1)) ->
			if
			:: DUE(0) -> p = 0
			:: DUE(1) -> p = 1
			fi;
			owner[p] = me; lease_left[p] = LEASE; inrun[me] = 1; cur[me] = p;
			k = acked[p] + 1;                /* MUTANT:noorder */
		};
		/* The POST: the receiver is down, or takes it (its 2xx perhaps lost). */
		atomic {
			CRASHPOINT;
			if
			:: down > 0 -> down--; k = 0     /* a failure: retried later */
			:: true ->
				assert(k <= committed[p]);          /* no event is delivered that was not committed */
				assert(k <= got[p] + 1);            /* deliveries of one purchase arrive in sequence order */
				if
				:: k > got[p] -> got[p] = k
				:: else                             /* a repeat: at least once */
				fi;
				if
				:: lost > 0 -> lost--; k = 0        /* the 2xx is lost: a failure to the relay */
				:: true
				fi
			fi
		};
		/* Record the outcome under the lease: delivered, or due again. */
		atomic {
			CRASHPOINT;
			if
			:: FENCED(me, p) && k != 0 && acked[p] + 1 == k -> acked[p] = k
			:: else
			fi;
			if
			:: FENCED(me, p) -> owner[p] = 0; lease_left[p] = 0
			:: else
			fi;
			inrun[me] = 0; k = 0
		}
	}
	od
}

/*
 * Time ages the leases; under a relay's live lease only as a stall. It
 * always passes otherwise, so that a run that delivers nothing more is
 * an infinite one, which the claim judges.
 */
active proctype Clock() {
end_tick:
	do
	:: atomic {
		!(BUSY(0) || BUSY(1)) || stalls > 0 ->
		if
		:: BUSY(0) || BUSY(1) -> stalls--
		:: else
		fi;
		if :: lease_left[0] > 0 -> lease_left[0]-- :: else fi;
		if :: lease_left[1] > 0 -> lease_left[1]-- :: else fi
	   }
	od
}

init {
	atomic {
		changes[0] = 3;
		changes[1] = 1;
		run Writer(0);
		run Writer(1);
		run Relay(1);
		run Relay(2)
	}
}

/* Every committed change is delivered at least once: in the end, every event of each purchase has been received. */
ltl delivered { <> [] (got[0] == nev[0] && got[1] == nev[1]) }
