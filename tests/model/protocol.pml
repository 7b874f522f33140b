/*
 * pglock's lock protocol, for SPIN: schema version 6 as on main, with issue 33's rules
 * (the wait after a promotion, tokens above every earlier timeline's, the advisory
 * takeover after the old holder's horizon, the whole tree dead by the local deadline).
 * docs/model.md maps each step to the code it stands for, and states the bounds.
 *
 * Two hosts run `pglock run --job x` (lease mode; advisory mode with -DADVISORY) against
 * a primary with one standby, replicated synchronously or asynchronously (chosen at the
 * start). Time is the server's clock, in ticks of 0.5 s (ttl 5 s = 10 ticks). Every
 * timestamp is kept as a count of ticks until (or since) it, which a tick moves on, so
 * the state space is finite without a bound on time: the check covers runs of any length.
 * A host's stopwatch may measure an interval up to DRIFT ticks short. Every statement is
 * sent at one tick and runs at any later one, or is lost before or after it ran (FAULTS
 * in all); a host may pause between any two steps for any length, or die (a host that
 * never acts again). Its watchdog and the kernel kill the command's whole tree at its
 * local deadline whatever happens to pglock (issue 33, item 3).
 *
 * Properties, named as the soak's checkers name them (tests/soak/overlap.py):
 *   held by two   never two commands of the job at once
 *   tokens        fencing tokens strictly rising in the order commands start
 *
 * Mutants: each must yield a counterexample (docs/model.md has them as timelines).
 *   NO_START_CHECK     the command forked without the start-deadline check
 *   WALL_CLOCK         renewals and deadlines timed on host0's wall clock (an NTP step back)
 *   NO_PROMOTION_WAIT  after a promotion, an old timeline's row (or none) taken at once
 *   FLAT_TOKENS        tokens not raised across timelines
 *   NO_INCARNATION     (advisory) the session lock's takeover whatever stamped the row
 *   EARLY_TAKEOVER     (advisory) the session lock's takeover before the old holder's
 *                      recorded horizon
 *   RESEND_ANYTIME     a resent acquire takes its own row back whatever its age, as
 *                      functions.sql's `OR l.holder_id = excluded.holder_id` does
 */

#define NH 2            /* hosts */
#define TTL 10          /* --ttl 5s */
#ifdef ADVISORY
#define HORIZON 8       /* advisory.horizon(): min(ttl, the server's drop bound) */
#define INTERVAL 3      /* advisory.CHECK_INTERVAL, 1.5 s */
#else
#define HORIZON TTL     /* LeaseRenewer.horizon */
#define INTERVAL 3      /* ttl/3 = 1.67 s, to the tick below */
#endif
#define MARGIN 2        /* heartbeat.margin(): max(1 s, ttl/10) */
#define RETRY 2         /* heartbeat.RETRY_INTERVAL, 1 s */
#ifdef WALL_CLOCK
#define JUMP 4          /* host0's wall clock steps back 2 s (NTP) */
#define SHORT(h) (h == 0 -> JUMP : DRIFT)
#else
#define SHORT(h) DRIFT
#endif
#define DRIFT 1         /* a stopwatch's interval at most one tick short */
#define AGE_CAP (HORIZON - MARGIN + SHORT(0) + 1)  /* an age beyond which nothing differs */
#ifndef RUNS
#define RUNS 2          /* invocations of pglock per host */
#endif
#ifndef FAULTS
#define FAULTS 2        /* statements lost (before or after they ran), in all */
#endif

/* The lock row of the job (table locks), as one server holds it. holder 0: no row. */
typedef Row {
    byte holder;        /* host + 1 */
    byte inv;           /* the invocation: holder_id is (holder, inv) */
    byte ctr;           /* the fencing token's counter */
    byte tl;            /* the timeline that last wrote the row */
    byte inc;           /* advisory: incarnation() that stamped it (timeline * 4 + life) */
    byte left;          /* ticks until expires_at (0: expired) */
    byte stop;          /* advisory, issue 33: ticks until the holder's horizon */
    bit rel;            /* released_at set */
};

Row P;                  /* the primary's row */
Row S;                  /* the standby's copy */
bool async;             /* asynchronous replication */
byte tl_now = 1;        /* the primary's WAL timeline */
byte life = 0;          /* advisory: server restarts (postmaster start time) */
byte epoch = 0;         /* connections: a restart or a promotion breaks them all */
byte wait = 0;          /* issue 33: ticks until this timeline's first sighting + ttl */
bool seen = true;       /* this timeline sighted (the first one: long ago) */
bool promoted = false;
bool restarted = false;
bool terminated = false;
byte sess = 0;          /* advisory: whose session holds the advisory lock (host + 1) */
byte faults = 0;

bool running[NH];       /* the command (its whole tree) alive */
byte kill_left[NH];     /* ticks until the watchdog's SIGKILL (0: due) */
byte age[NH];           /* ticks since the statement in flight was sent */
bool aging[NH];
byte started_tok = 0;   /* token of the last command started */
#ifdef BFS
short clk = 0;          /* (pan's breadth-first search refuses hidden variables) */
#else
hidden short clk = 0;   /* the server clock, for the trail's timeline only */
#endif

#define INC (tl_now * 4 + life)
#ifdef FLAT_TOKENS
#define TOKEN (P.ctr)
#else
#define TOKEN (P.tl * 16 + P.ctr)       /* the timeline in the token's high bits */
#endif
#ifdef ADVISORY
#define STAMP P.inc = INC; P.stop = HORIZON
#else
#define STAMP skip
#endif
#ifdef NO_PROMOTION_WAIT
#define WAITED true
#else
#define WAITED (wait == 0)
#endif
#ifdef RESEND_ANYTIME
#define RESEND_OK true
#else
#define RESEND_OK (P.tl == tl_now || P.left > 0 || WAITED)
#endif
#ifdef NO_INCARNATION
#define SAME_INC true
#else
#define SAME_INC (P.inc == INC)
#endif
#ifdef EARLY_TAKEOVER
#define PAST_HORIZON true
#else
#define PAST_HORIZON (P.stop == 0)
#endif

#define copy(dst, src) \
    dst.holder = src.holder; dst.inv = src.inv; dst.ctr = src.ctr; dst.tl = src.tl; \
    dst.inc = src.inc; dst.left = src.left; dst.stop = src.stop; \
    dst.rel = src.rel

#define DIFFER (S.holder != P.holder || S.inv != P.inv || S.ctr != P.ctr || S.tl != P.tl \
    || S.inc != P.inc || S.left != P.left || S.stop != P.stop || S.rel != P.rel)
#define down(x) if :: x > 0 -> x-- :: else -> skip fi

/* A committed write: on the standby too when replication is synchronous. */
inline commit() {
    if
    :: !async -> copy(S, P)
    :: else -> skip
    fi
}

/* Any statement on a timeline not yet sighted records the sighting, durably. */
inline sighting() {
    if
    :: !seen -> seen = true; wait = TTL
    :: else -> skip
    fi
}

/* functions.sql acquire(), with issue 33's rules; `won` says whether it took the row. */
inline acquire(h, r, won) {
    sighting();
    won = false;
#ifdef ADVISORY
    /* pg_try_advisory_lock first; a loser's session (and its lock) ends. */
    if
    :: sess == 0 || sess == h + 1 -> sess = h + 1
    :: else -> goto acquired
    fi;
#endif
    if
    /* A resent acquire finds its own row. After a promotion, only while it has not
       expired: an expired one may have been taken by another host on the old primary,
       in a write the promotion lost (found by this model; RESEND_ANYTIME is the clause
       as functions.sql has it). */
    :: P.holder == h + 1 && P.inv == r && RESEND_OK -> won = true
    :: P.holder != 0 && P.tl == tl_now && P.left == 0 -> won = true
    :: P.holder != 0 && P.tl < tl_now && P.left == 0 && WAITED -> won = true
    :: P.holder == 0 && WAITED -> won = true
#ifdef ADVISORY
    /* The session lock proves the row's holder gone: only if this incarnation stamped
       the row, and once the holder's own horizon has passed. */
    :: P.holder != 0 && !P.rel && SAME_INC && PAST_HORIZON -> won = true
#endif
    :: else -> skip
    fi;
    if
    :: won ->
        if
        :: P.holder == 0 -> P.ctr = 1
        :: else -> P.ctr = P.ctr + 1
        fi;
        P.holder = h + 1; P.inv = r; P.tl = tl_now; STAMP;
        P.left = TTL; P.rel = false;
        commit()
    :: else -> skip
    fi;
#ifdef ADVISORY
acquired:
    if
    :: !won && sess == h + 1 -> sess = 0
    :: else -> skip
    fi;
#endif
    skip
}

/* renew() (advisory: the check, or retake() on a new session). ours: 1 renewed,
   0 lost (lease.Renewal.LOST), 2 try again (a contender's session holds the lock). */
inline renew(h, r, ours) {
    sighting();
    ours = (P.holder == h + 1 && P.inv == r);
#ifdef ADVISORY
    if
    :: sess == 0 || sess == h + 1 ->
        if
        :: ours -> sess = h + 1
        :: else -> if :: sess == h + 1 -> sess = 0 :: else -> skip fi
        fi
    :: else -> if :: ours -> ours = 2 :: else -> skip fi
    fi;
#endif
    if
    :: ours == 1 -> P.left = TTL; P.tl = tl_now; STAMP; commit()
    :: else -> skip
    fi
}

/* release() / finish(): expires at acquired_at + hold, or clk. */
inline release(h, r) {
    sighting();
    if
    :: P.holder == h + 1 && P.inv == r -> P.rel = true; P.left = 0; commit()
    :: else -> skip
    fi;
#ifdef ADVISORY
    if :: sess == h + 1 -> sess = 0 :: else -> skip fi;  /* the session closes after */
#endif
    skip
}

/* The command's start, and the properties. */
inline fork(h, tok) {
    printf("MSC: t=%d host%d starts its command, token %d\n", clk, h, tok);
    assert(!running[1 - h]);            /* held by two */
    assert(tok > started_tok);          /* tokens */
    started_tok = tok;
    running[h] = true
}

/* A fault: a statement lost; a broken connection's is lost for free. */
#define LOSABLE (sent_epoch != epoch || faults < FAULTS)
#define LOSE if :: sent_epoch == epoch -> faults++ :: else -> skip fi

/* One host: pglock's main thread and heartbeat (pglock/run/slot.py,
   pglock/lock/heartbeat.py). */
proctype Host(byte h) {
    byte r = 0;             /* invocation */
    byte sent_epoch;
    byte renew_left;        /* ticks until the next renewal */
    byte tok;
    bool won;
    byte ours;

idle:
    atomic { sent_epoch = 0; renew_left = 0; tok = 0; won = false; ours = 0;
             aging[h] = false; age[h] = 0; kill_left[h] = 0 };
    if
    :: r < RUNS -> r++
    :: else -> goto dead
    fi;
sending:
    atomic { aging[h] = true; age[h] = 0; sent_epoch = epoch;
             printf("MSC: t=%d host%d sends acquire (run %d)\n", clk, h, r) }
    if
    :: atomic { sent_epoch == epoch -> acquire(h, r, won); tok = TOKEN;
          printf("MSC: t=%d host%d: acquire runs, won %d\n", clk, h, won) };
        if
        :: won -> goto start
        :: !won -> goto idle                                /* exit 75 */
        :: atomic { won && faults < FAULTS -> faults++;
              printf("MSC: t=%d host%d: acquire's reply lost\n", clk, h) }; goto cut
        fi
    :: atomic { LOSABLE -> LOSE; printf("MSC: t=%d host%d: acquire lost\n", clk, h) };
        goto cut
    fi;
cut:                        /* a cut acquire is sent again within --connect-timeout */
    if
    :: goto sending
    :: goto idle
    fi;
start:                      /* Slot.start -> Child.spawn: the check before the fork */
    atomic {
#ifndef NO_START_CHECK
        if
        :: age[h] > HORIZON - MARGIN + SHORT(h) ->
            printf("MSC: t=%d host%d: start deadline passed, not started\n", clk, h);
            goto finish
        :: else -> skip
        fi;
#endif
        if
        :: age[h] < HORIZON - MARGIN + SHORT(h) -> kill_left[h] = HORIZON - MARGIN + SHORT(h) - age[h]
        :: else -> kill_left[h] = 0
        fi;
        if :: age[h] < INTERVAL -> renew_left = INTERVAL - age[h] :: else -> renew_left = 0 fi;
        aging[h] = false; age[h] = 0; sent_epoch = epoch;
        fork(h, tok)
    };
holding:                    /* Heartbeat._loop and Supervisor.wait */
    /* A renewal runs at the tick it is sent (a later run only pushes the expiry further
       past the sending time the deadline counts from), or is lost before or after. */
    if
    :: atomic { running[h] && renew_left == 0 && sent_epoch == epoch ->
          renew(h, r, ours);
          printf("MSC: t=%d host%d: renewal runs, %d\n", clk, h, ours);
          if
          :: ours == 1 -> kill_left[h] = HORIZON - MARGIN + SHORT(h); renew_left = INTERVAL
          :: ours == 2 -> renew_left = RETRY
          :: ours == 0 -> running[h] = false;              /* lost: the command stopped */
              printf("MSC: t=%d host%d: lock lost, command stopped\n", clk, h)
          fi;
          ours = 0 }; goto holding
    :: atomic { running[h] && renew_left == 0 && sent_epoch == epoch && faults < FAULTS ->
          faults++; renew(h, r, ours); renew_left = RETRY;
          printf("MSC: t=%d host%d: renewal runs (%d), its reply lost\n", clk, h, ours);
          ours = 0 }; goto holding
    :: atomic { running[h] && renew_left == 0 && LOSABLE -> LOSE; renew_left = RETRY;
          sent_epoch = epoch; printf("MSC: t=%d host%d: renewal lost\n", clk, h) };
        goto holding
    :: atomic { running[h] -> running[h] = false;
          printf("MSC: t=%d host%d: the command ends\n", clk, h) }; goto finish
    :: !running[h] -> goto finish                           /* the watchdog killed it */
    fi;
finish:
    atomic { sent_epoch = epoch; kill_left[h] = 0; renew_left = 0; aging[h] = false;
             age[h] = 0 };
    if
    :: atomic { sent_epoch == epoch -> release(h, r);
          printf("MSC: t=%d host%d: release runs\n", clk, h) }
    :: atomic { LOSABLE -> LOSE; printf("MSC: t=%d host%d: release lost\n", clk, h) }
    fi;
    goto idle;
dead:
    skip
}

/* A tick of the server clock. Each watchdog first kills a command whose deadline has come
   (time cannot pass it with the command alive); then every count moves on. */
active proctype Clock() {
    byte h;
    do
    :: atomic {
        h = 0;
        do
        :: h < NH ->
            if
            :: running[h] && kill_left[h] == 0 ->
                running[h] = false;
                printf("MSC: t=%d host%d's watchdog kills the command\n", clk, h)
            :: else -> skip
            fi;
            down(kill_left[h]);
            if :: aging[h] && age[h] < AGE_CAP -> age[h]++ :: else -> skip fi;
            h++
        :: else -> break
        od;
        down(P.left); down(P.stop);
        down(S.left); down(S.stop);
        down(wait);
        clk++
       }
    od
}

/* The cluster: replication, one failover, and (advisory) one restart and one session
   ended under a live holder (a terminated backend, a proxy's reset, a SIGKILLed pglock). */
active proctype Cluster() {
    do
    :: atomic { async && DIFFER -> copy(S, P);               /* the standby catches up */
          printf("MSC: t=%d the standby replays the primary's row\n", clk) }
    :: atomic { !promoted ->
        promoted = true;
        copy(P, S);                                         /* unreplicated writes lost */
        tl_now++; seen = false; epoch++; sess = 0;
        printf("MSC: t=%d the standby is promoted, timeline %d\n", clk, tl_now) }
#if defined(ADVISORY) && defined(RESTART)
    :: atomic { !restarted ->
        restarted = true; life++; epoch++; sess = 0;
        printf("MSC: t=%d the server restarts\n", clk) }
#endif
#ifdef ADVISORY
    :: atomic { !terminated && sess != 0 ->
        terminated = true;
        printf("MSC: t=%d host%d's session ends\n", clk, sess - 1);
        sess = 0 }
#endif
    od
}

init {
    atomic {
#ifdef ASYNC
        async = true;           /* a mutant's search, shortened: its failure needs it */
#else
        if
        :: async = false
        :: async = true
        fi;
#endif
        printf("MSC: replication asynchronous: %d\n", async);
        run Host(0);
        run Host(1)
    }
}
