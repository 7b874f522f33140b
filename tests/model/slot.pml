/*
 * One scheduled slot of one job on two hosts, for SPIN: attempts and retries
 * (--retries 1), the hold against cron's skew between hosts, statements cut by a server
 * restart. docs/model.md maps each step to the code.
 *
 * Each host's cron fires the slot once, up to SKEW ticks after the other (one tick = 5 s;
 * hosts' clocks within 10 s of each other: docs/lease.md, "The hold"). The holder keeps
 * the lock between attempts (finish with p_keep) and records each further attempt's
 * start (start_run); a statement may be cut by a server restart (FAULTS in all), and a
 * host may die at any step (its lock then expires after TTL ticks). Replication is
 * synchronous (nothing committed is lost).
 *
 * Properties, named as the soak's slot checker names them (tests/soak/slots.py):
 *   duplicate            a slot succeeds at most once
 *   unexplained miss     a slot is never left without an attempt while a live host holds
 *                        its lock: when both hosts are done, the slot succeeded, spent its
 *                        attempts, or a host died holding it
 * With -DLITERAL the job has no --schedule (the literal crontab line): the hold alone
 * keeps the second host's trigger from running it again.
 *
 * Mutants:
 *   NO_RESEND    a further attempt's start record not sent again after a cut (main
 *                before issue 34's fix: soak defect 3, docs/soak.md)
 *   SHORT_HOLD   (LITERAL) the hold shortened below the cron skew the docs allow
 */

#define SKEW 2          /* 10 s between hosts' crons */
#ifdef SHORT_HOLD
#define HOLD 1          /* 5 s */
#else
#define HOLD 4          /* 20 s: the literal line's default hold */
#endif
#define TTL 2           /* a dead holder's lock expires (in ticks of 5 s) */
#define LIMIT 2         /* 1 + --retries 1 */
#ifndef FAULTS
#define FAULTS 2
#endif

/* The server: the lock row and the slot's row. */
byte holder = 0;        /* host + 1 while held */
bool released = true;
byte hold_left = 0;     /* ticks until the released row's hold ends */
byte dead_left = 0;     /* ticks until a dead holder's row expires */
byte attempts = 0;      /* slots.attempts */
byte succeeded = 0;     /* succeeded runs recorded */
bool closed = false;    /* slots.closed_at */
byte faults = 0;

/* Hosts */
bool done[2];
bool died_holding = false;
bool fired[2];
byte skew_left = SKEW;  /* the later host fires within SKEW of the first */
bool first_fired = false;

#ifdef LITERAL
#define SLOT_RAN false
#else
#define SLOT_RAN (succeeded > 0 || closed || attempts >= LIMIT)
#endif

/* acquire(): the row free (released past its hold, or expired), and the slot not done;
   the winner's run (attempt 1) recorded in the same statement. */
inline acquire(h, won) {
    won = false;
    if
    :: !SLOT_RAN && released && hold_left == 0 ->
        holder = h + 1; released = false; won = true;
#ifndef LITERAL
        attempts++;
#endif
        hold_left = HOLD        /* the hold counts from the start (cron's fire) */
    :: else -> skip
    fi
}

/* A statement that may be cut (a server restart): `cut` true when it did not run. */
#define CUTTABLE faults < FAULTS

proctype Host(byte h) {
    bool won;
    byte attempt = 0;
    bool ok;

    /* cron fires this host's trigger: the first host at once, the other within SKEW */
    /* the acquire in the tick cron fires (a pglock late by more than the hold's slack
       is outside the promise: docs/lease.md, "The hold") */
    atomic { !first_fired -> first_fired = true; fired[h] = true;
             printf("MSC: host%d's cron fires\n", h);
             acquire(h, won); printf("MSC: host%d: acquire, won %d\n", h, won) };
    if
    :: !won -> goto over                                    /* exit 75 */
    :: else -> attempt = 1
    fi;
command:
    /* the command: fails or succeeds; the host may die at any step */
    if
    :: atomic { printf("MSC: host%d: attempt %d succeeds\n", h, attempt); ok = true }
    :: atomic { printf("MSC: host%d: attempt %d fails\n", h, attempt); ok = false }
    :: atomic { died_holding = true; dead_left = TTL; printf("MSC: host%d dies\n", h) };
        goto dead
    fi;
finish:                     /* finish(): the end record, sent again until it lands */
    if
    :: atomic { CUTTABLE -> faults++; printf("MSC: host%d: the end record is cut\n", h) };
        goto finish
    :: atomic {
        if
        :: ok -> succeeded++; holder = 0; released = true
        :: !ok && attempt < LIMIT -> skip                 /* kept for the next attempt */
        :: !ok && attempt >= LIMIT -> holder = 0; released = true
        fi;
        printf("MSC: host%d: end of attempt %d recorded\n", h, attempt) }
    fi;
    if
    :: ok || attempt >= LIMIT -> goto over
    :: else -> skip
    fi;
start_run:                  /* the backoff, then start_run(): the next attempt's record */
    if
    :: atomic { CUTTABLE -> faults++;
          printf("MSC: host%d: the start record of attempt %d is cut\n", h, attempt + 1) };
#ifdef NO_RESEND
        /* exit 125: the lock stays held until its expiry, nobody attempts the slot */
        atomic { dead_left = TTL; holder = 0 }; goto over
#else
        goto start_run      /* sent again within --connect-timeout */
#endif
    :: atomic { attempt++; attempts++;
          printf("MSC: host%d: attempt %d recorded\n", h, attempt) };
        goto command
    fi;
over:
    done[h] = true;
    goto end;
dead:
    done[h] = true;
end:
    skip
}

/* The other host's trigger, within SKEW of the first. */
proctype Late(byte h) {
    bool won;
    if
    :: atomic { first_fired && !fired[h] -> fired[h] = true;
                printf("MSC: host%d's cron fires\n", h);
                acquire(h, won); printf("MSC: host%d: acquire, won %d\n", h, won) }
    fi;
    /* a second winner runs the slot once more, to success: the worst case */
    if
    :: won -> atomic { succeeded++; holder = 0; released = true;
                       printf("MSC: host%d: its attempt succeeds\n", h) }
    :: else -> skip
    fi;
    done[h] = true
}

/* Five seconds pass: the hold and a dead holder's lease run down; the late host's cron
   cannot fire later than SKEW after the first. */
active proctype Clock() {
    do
    :: atomic {
        (!first_fired || fired[1] || skew_left > 0) && !(done[0] && done[1]) ->
        if :: hold_left > 0 -> hold_left-- :: else -> skip fi;
        if :: first_fired && skew_left > 0 -> skew_left-- :: else -> skip fi;
        if
        :: dead_left > 0 -> dead_left--;
            if :: dead_left == 0 -> holder = 0; released = true :: else -> skip fi
        :: else -> skip
        fi;
        printf("MSC: five seconds pass\n") }
    od
}

/* The checkers, once both hosts are done. */
active proctype Checker() {
    (done[0] && done[1]);
    printf("MSC: attempts %d, succeeded %d, a host died holding it %d\n",
           attempts, succeeded, died_holding);
    assert(succeeded <= 1);                                 /* duplicate */
#ifndef LITERAL
    assert(succeeded == 1 || attempts >= LIMIT || died_holding);  /* unexplained miss */
#endif
}

init {
    atomic { run Host(0); run Late(1) }
}
