/*
 * pglock's lock protocol, for SPIN: schema version 9 (the rules R1-R7 of the no-two-holders
 * issue, as functions.sql has them) and the client's steps as pglock/run/slot.py takes them.
 * docs/model.md maps each step to the code it stands for and states the bounds; spin.py
 * lists the cases (the suite's, the long set's, the probes and the mutants).
 *
 * Two hosts run `pglock run --job x --retries 1` (lease mode; advisory mode with -DADVISORY)
 * against a primary with one standby, replicated asynchronously (the standby replays the
 * primary's whole state whenever it likes, which includes every run of synchronous
 * replication; -DSYNC_TOO also explores synchronous commits). Time is in ticks of 0.5 s.
 * Every timestamp is kept as a count of ticks until (or since) it, which a tick moves on, so
 * the state space is finite without a bound on time: the check covers runs of any length.
 * The bounds are on events: RUNS invocations of pglock per host, each of up to two attempts;
 * FAULTS statements lost besides those a broken connection loses; one promotion; one
 * advisory session ended under its holder (R7's eviction, a proxy's reset); one server
 * restart with -DRESTART.
 *
 * A host may pause between any two steps for any length, or never act again. A statement
 * runs at the tick it is sent, or is lost; its answer comes then, or is lost, or (a
 * confirmation) comes past the local deadline. A later run or answer adds nothing: a
 * confirmation that runs late only pushes the row's timestamps further past the send its
 * deadline counts from, and the host may as well have sent it late (docs/model.md,
 * "Statements"). Each host has two actors that stop its command: pglock, which counts the
 * lock lost at its local deadline (the last confirmation's send + horizon - margin - grace:
 * SIGTERM, SIGKILL a grace later) whenever it gets to it, and its watchdog, which kills the
 * whole tree at that deadline + margin/2 + grace, forced by the clock. Both read a stopwatch
 * that may measure an interval up to SHORT(h) ticks short (DRIFT; an NTP step for host0 with
 * WALL_CLOCK).
 *
 * Properties, named as the soak's checkers name them (tests/soak/overlap.py):
 *   held by two   never two commands of the job at once
 *   tokens        fencing tokens rising in the order commands start: strictly, but for one
 *                 claim's further attempt (its own token again)
 *   progress      once every invocation is over, a command ran, unless a statement was lost
 *                 or a host came too late for a deadline (the skip is explained)
 *
 * Parameters: ADVISORY, RUNS, FAULTS, DRIFT, OFFSET (the new primary's clock that many ticks
 * behind the old one's), TTL_DIFF (host1 on the longer ttl), PAST_ROW (the job ran before
 * with every host's ttl, replicated: R5's assumption), RESTART, SYNC_TOO. Probes: REACHED.
 * Mutants (each must yield a counterexample): NO_START_CHECK, WALL_CLOCK, KILL_FROM_FORK,
 * WATCHDOG_AT_PGLOCK (a control), TAKEOVER_EARLY, EARLY_TAKEOVER, NO_INCARNATION,
 * FLAT_TOKENS, TOKEN_KEEP, NO_PROMOTION_WAIT, NO_LONGEST, RESEND_ANYTIME, RESEND_EXPIRY,
 * NO_R3, NO_R4, R4_STRICT (a control), RENEW_ANY, RELEASE_ANY, RESTAMP, RELEASE_RESTAMP,
 * RELEASE_RESTAMP_ALWAYS, NEVER_WIN, NO_R6.
 */

#define NH 2            /* hosts */
#ifndef RUNS
#define RUNS 1          /* invocations of pglock per host */
#endif
#ifndef RUNS1
#define RUNS1 RUNS      /* host1's (a third claimant for less: RUNS=2 RUNS1=1) */
#endif
#ifndef FAULTS
#define FAULTS 1        /* statements lost (before or after they ran), in all */
#endif
#ifndef DRIFT
#define DRIFT 0         /* whole ticks a stopwatch may measure short (the kill lands at the
                           end of its tick: 0 stands for any error below one tick) */
#endif
#ifndef OFFSET
#define OFFSET 0        /* ticks the new primary's clock is behind the old one's */
#endif
#ifndef PROBE
#define PROBE 0
#endif
/* Reachability probes: REACHED(n, cond) marks a state that must be reachable. With -DPROBES
   (the suite's exhaustive runs) each probe says once that it was reached, and the search
   goes on; with -DPROBE=n, probe n is an assertion, so that pan stops there with a trail. */
#if PROBE > 0
#define REACHED(n, cond) assert(!(PROBE == n && (cond)))
#elif defined(PROBES)
c_decl { int fired[32]; }
hidden byte probe_hit;
#define REACHED(n, cond) probe_hit = (cond); \
    c_code { if (probe_hit && !fired[n]) { fired[n] = 1; printf("reached: %d\n", n); } }
#else
#define REACHED(n, cond) skip
#endif

/* Each host's figures, in ticks, for its ttl: the row's ttl and the horizon (how long after a
   confirmation's send the lock is certainly ours), the renewal interval, the local deadline
   (horizon - margin - grace: R4's deadline, pglock's SIGTERM), the start deadline (horizon -
   margin: heartbeat.start_deadline) and the watchdog's SIGKILL (+ margin/2:
   heartbeat.watchdogs_turn). margin = max(1 s, horizon/10), grace = min(--kill-after 10 s,
   horizon/4), as pglock/lock/heartbeat.py computes them. */
#ifdef ADVISORY
/* --ttl 7s: advisory.horizon(7) = min(7, max(3, round(7/4)) + 3) = 6 s; checks every
   CHECK_INTERVAL 1.5 s; margin 1 s, grace 1.5 s. */
#define TTL_S 14
#define HZ_S 12
#define IV_S 3
#define LOST_S 7
#define START_S 10
#define WD_S 11
/* --ttl 8s: horizon 6 s (the same deadlines) */
#define TTL_L 16
#define HZ_L 12
#define IV_L 3
#define LOST_L 7
#define START_L 10
#define WD_L 11
#else
/* --ttl 5s: renewals every ttl/3 = 1.67 s (from the tick below); margin 1 s, grace
   1.25 s (the deadline 5.5 s, from the tick above). */
#define TTL_S 10
#define HZ_S 10
#define IV_S 3
#define LOST_S 6
#define START_S 8
#define WD_S 9
/* --ttl 6s: every 2 s; margin 1 s, grace 1.5 s */
#define TTL_L 12
#define HZ_L 12
#define IV_L 4
#define LOST_L 7
#define START_L 10
#define WD_L 11
#endif

#ifdef TTL_DIFF
#define LONG(h) (h == 1)
#define MAXTTL TTL_L
#else
#define LONG(h) false
#define MAXTTL TTL_S
#endif
#define TTL(h) (LONG(h) -> TTL_L : TTL_S)
#define IV(h) (LONG(h) -> IV_L : IV_S)
#define LOST(h) (LONG(h) -> LOST_L : LOST_S)
#define START(h) (LONG(h) -> START_L : START_S)
#define WD(h) (LONG(h) -> WD_L : WD_S)
#define TTLV(b) (b -> TTL_L : TTL_S)        /* a row's ttl column */
#define HZV(b) (b -> HZ_L : HZ_S)           /* advisory_horizon() of it */

#ifdef WALL_CLOCK
#define JUMP 4          /* host0's wall clock steps back 2 s (NTP) */
#define SHORT(h) (h == 0 -> JUMP : DRIFT)
#define CAP (WD_L + JUMP + 1)
#else
#define SHORT(h) DRIFT
#define CAP (WD_L + DRIFT + 1)              /* an age past every deadline */
#endif
#ifdef WATCHDOG_AT_PGLOCK
#define KILL(h) (START(h) + SHORT(h))       /* the SIGKILL pglock itself sends */
#else
#define KILL(h) (WD(h) + SHORT(h))          /* the watchdog's */
#endif

/* The lock row of the job (table locks), as one server holds it. */
typedef Row {
    unsigned holder : 2;    /* 0: no row; host + 1; 3: a past run's (PAST_ROW) */
    unsigned inv : 2;       /* the invocation: holder_id is (holder, inv) */
    unsigned ctr : 5;       /* the fencing token's counter */
    unsigned tl : 2;        /* timeline: stamped by an acquisition only (R2) */
    unsigned itl : 2;       /* advisory: incarnation() of the last acquire or renewal */
    bit ilife;
    unsigned left : 5;      /* ticks until expires_at reads past on the new primary's clock */
    unsigned stop : 5;      /* advisory: the same for stops_by */
    bit rel;                /* released_at set */
    bit ttl;                /* its ttl column: the long ttl */
    bit longest;            /* R5: longest_ttl, the long ttl */
};

/* One host: what its watchdog and the clock see of it. */
typedef Host {
    unsigned since : 5;     /* ticks since the last confirmation acted on was sent */
    bit hold;               /* since counts (a claim is held) */
    bit running;            /* the command (its whole tree) alive */
    bit brk;                /* its connection broken: its next statement is lost */
    bit done;               /* its invocations over */
    bit ran;                /* it started a command */
};

Row P;                      /* the primary's row */
Row S;                      /* the standby's copy */
Host H[NH];
bit async;
unsigned tl_now : 2 = 1;    /* the primary's WAL timeline */
bit life;                   /* advisory: a server restart (the postmaster's start time) */
bit seen = 1;               /* this timeline sighted (the first one: long ago) */
unsigned seen_age : 5;      /* ticks since that sighting (up to the longest wait) */
bit promoted;
bit restarted;
bit terminated;
unsigned sess : 2;          /* advisory: whose session holds the advisory lock (host + 1) */
unsigned faults : 2;
byte started_tok;           /* the token of the last command started */
unsigned started_by : 3;    /* and its claim: host * 4 + invocation */
bit excused;                /* a statement was lost, or a host late for a deadline */
bit started;                /* the cluster set up (the hosts wait for it) */
#if PROBE == 2 || PROBE == 13
byte beats;                 /* renewals of the command that runs (one at a time here) */
byte ranp;                  /* which commands ran at the promotion */
#elif defined(PROBES)
hidden byte beats;          /* (path-dependent, not part of the state: a probe reached with
                               it was reached; one missed would fail the suite) */
hidden byte ranp;           /* which commands ran at the promotion */
#endif
#ifdef BFS
short clk = 0;              /* (pan's breadth-first search refuses hidden variables) */
#else
hidden short clk = 0;       /* the server clock, for the trail's timeline only */
#endif

/* The clocks: timestamps the old primary wrote are read by the new one, OFFSET ticks
   behind, as OFFSET ticks later. So each count runs to the moment the new primary's clock
   reads it past; on the first timeline it is past at CLK. */
#define CLK (tl_now == 1 -> OFFSET : 0)
#ifdef TAKEOVER_EARLY
#define EXPIRED (P.left <= CLK + 1)         /* a tick early */
#else
#define EXPIRED (P.left <= CLK)             /* expires_at <= now */
#endif
#ifdef ADVISORY
#define STOPPED (P.stop <= CLK)             /* coalesce(stops_by, expires_at) <= now */
#else
#define STOPPED EXPIRED
#endif

#define OWN(h, r) (P.holder == h + 1 && P.inv == r)
#ifdef RENEW_ANY
#define RENEWS(h, r) (P.holder != 0)
#else
#define RENEWS(h, r) OWN(h, r)
#endif
#ifdef RELEASE_ANY
#define RELEASES(h, r) (P.holder != 0)
#else
#define RELEASES(h, r) OWN(h, r)
#endif

/* R3: keeps(): an own row of an older timeline is kept only while not stopped. */
#define KEEPS_R3 (P.tl == tl_now || !STOPPED)
#ifdef NO_R3
#define KEEPS true
#else
#define KEEPS (P.tl == tl_now || !STOPPED)
#endif

/* R1: a resent acquire's own row takes the wait like any other row of an older timeline.
   Before version 9 it was taken at once while unexpired (RESEND_EXPIRY), before version 7
   whatever its age (RESEND_ANYTIME). */
#if defined(RESEND_ANYTIME)
#define RESEND_OK(h, r) OWN(h, r)
#elif defined(RESEND_EXPIRY)
#define RESEND_OK(h, r) (OWN(h, r) && !EXPIRED)
#else
#define RESEND_OK(h, r) false
#endif

/* R5: the wait after a promotion ends at first_seen + the longest ttl the row (or, with no
   row, the newest earlier timeline) knew, or the contender's own. */
#ifdef NO_LONGEST
#define ROW_WAIT(h) ((P.ttl || LONG(h)) -> TTL_L : TTL_S)
#else
#define ROW_WAIT(h) ((P.longest || P.ttl || LONG(h)) -> TTL_L : TTL_S)
#endif
/* R5: no row: the contender's ttl, or the longest of the newest earlier timeline (the
   schema's timeline 1 granted every host's ttl before: R5's assumption) */
#define NOROW_WAIT(h) MAXTTL
#ifdef NO_PROMOTION_WAIT
#define WAITED(h) true
#define NOROW_OK(h) true
#else
#define WAITED(h) (seen_age >= ROW_WAIT(h))
#define NOROW_OK(h) (tl_now == 1 || seen_age >= NOROW_WAIT(h))
#endif

#ifdef ADVISORY
#ifdef NO_INCARNATION
#define SAME_INC true
#else
#define SAME_INC (P.itl == tl_now && P.ilife == life)
#endif
#ifdef EARLY_TAKEOVER
#define PAST_HORIZON true
#else
#define PAST_HORIZON STOPPED
#endif
/* The session lock held proves the row's holder gone: an unreleased row this incarnation
   stamped, once its holder's horizon (stops_by) has passed. */
#define SESSION_CLAUSE (!P.rel && SAME_INC && PAST_HORIZON)
#else
#define SESSION_CLAUSE false
#endif

#ifdef FLAT_TOKENS
#define TOKEN (P.ctr)
#else
#define TOKEN (P.tl * 32 + P.ctr)           /* the timeline in the token's high bits */
#endif

#define copy(dst, src) \
    dst.holder = src.holder; dst.inv = src.inv; dst.ctr = src.ctr; dst.tl = src.tl; \
    dst.itl = src.itl; dst.ilife = src.ilife; dst.left = src.left; dst.stop = src.stop; \
    dst.rel = src.rel; dst.ttl = src.ttl; dst.longest = src.longest
#define clear(r) \
    r.holder = 0; r.inv = 0; r.ctr = 0; r.tl = 0; r.itl = 0; r.ilife = 0; r.left = 0; \
    r.stop = 0; r.rel = 0; r.ttl = 0; r.longest = 0
#define DIFFER (S.holder != P.holder || S.inv != P.inv || S.ctr != P.ctr || S.tl != P.tl \
    || S.itl != P.itl || S.ilife != P.ilife || S.left != P.left || S.stop != P.stop \
    || S.rel != P.rel || S.ttl != P.ttl || S.longest != P.longest)
#define down(x) if :: x > 0 -> x-- :: else -> skip fi

/* Statement results */
#define LOSTLOCK 0
#define OURS 1
#define CONTENDED 2     /* advisory retake: a contender's session holds the lock for now */
#define HELD 0          /* acquire: refused */
#define WON 1
#define WAIT 2          /* acquire: refused by the wait after a promotion alone (R6) */

/* A committed write: on the standby too when replication is synchronous. */
inline commit() {
    if
    :: !async && !promoted -> copy(S, P)
    :: else -> skip
    fi
}

/* The first acquire on a timeline records its first sighting (sighting(): durably); so
   does a holder's renew, finish or release that finds its row of an older timeline. */
inline sighting() {
    if
    :: !seen -> seen = 1; seen_age = 0
    :: else -> skip
    fi
}
#define OLDER_SIGHTING if :: P.tl < tl_now -> sighting() :: else -> skip fi

/* functions.sql acquire() (in advisory mode once take() has taken the session lock): the
   takeover when takeable() and, on a row of an older timeline, once the wait is over (R1:
   the caller's own row too; R5: the longest ttl); res WON, HELD or WAIT (refused by the
   wait alone: promotion_wait, R6); tok the token won. */
inline acquire(h, r) {
    sighting();
    if
    :: P.holder == 0 ->
        if
        :: NOROW_OK(h) -> res = WON
        :: else -> res = WAIT; told = (NOROW_WAIT(h) == TTL_L)
        fi
    :: else ->
        if
        :: OWN(h, r) || EXPIRED || SESSION_CLAUSE ->
            if
            :: P.tl == tl_now || RESEND_OK(h, r) || WAITED(h) -> res = WON
            :: else -> res = WAIT; told = (ROW_WAIT(h) == TTL_L)
            fi
        :: else -> res = HELD
        fi
    fi;
    REACHED(4, OWN(h, r) && P.tl < tl_now);
    REACHED(6, res == WON && !OWN(h, r) && !EXPIRED);
    REACHED(7, res == WAIT);
    REACHED(15, res == WON && OWN(h, r) && P.tl == tl_now);
#ifdef NEVER_WIN
    if :: res == WON -> res = HELD :: else -> skip fi;
#endif
    if
    :: res == WON ->
        /* R5: the longest ttl granted on the row's timeline */
        if
        :: P.holder != 0 && P.tl == tl_now -> P.longest = P.longest || P.ttl || LONG(h)
        :: else -> P.longest = LONG(h)
        fi;
        if
        :: P.holder == 0 -> P.ctr = 1
#ifdef TOKEN_KEEP
        :: P.holder != 0 && P.tl == tl_now -> skip
        :: P.holder != 0 && P.tl != tl_now -> P.ctr = P.ctr + 1
#else
        :: else -> P.ctr = P.ctr + 1
#endif
        fi;
        P.holder = h + 1; P.inv = r; P.tl = tl_now; P.ttl = LONG(h); P.rel = 0;
        P.left = TTL(h) + CLK;
#ifdef ADVISORY
        P.stop = HZV(LONG(h)) + CLK; P.itl = tl_now; P.ilife = life;
#endif
        tok = TOKEN;
        commit()
    :: else -> skip
    fi
}

/* A release of the row (release(), finish()): it expires now (no hold); R2: no restamp. */
inline released(h, r) {
    if
    :: RELEASES(h, r) ->
        OLDER_SIGHTING;
#if defined(RELEASE_RESTAMP_ALWAYS)
        P.tl = tl_now;
#elif defined(RELEASE_RESTAMP)
        if :: !EXPIRED -> P.tl = tl_now :: else -> skip fi;
#endif
        P.rel = 1; P.left = CLK; commit()
    :: else -> skip
    fi
}

/* A renewal of the row by its holder, once the statement found it the caller's. R2: the
   timeline stays (RESTAMP: functions.sql's restamp() before version 9). Advisory: stamped
   with the incarnation answering now (renew and retake; finish with p_keep does not). */
inline renewed(stamp) {
#ifdef RESTAMP
    if :: !EXPIRED -> P.tl = tl_now :: else -> skip fi;
#endif
    P.left = TTLV(P.ttl) + CLK;
#ifdef ADVISORY
    P.stop = HZV(P.ttl) + CLK;
    if :: stamp -> P.itl = tl_now; P.ilife = life :: else -> skip fi;
#endif
    OLDER_SIGHTING;
    commit()
}

/* renew(): the heartbeat's renewal, one in the backoff, the one before a further attempt's
   fork. Advisory: the check on the holder's own session (renew with p_advisory), or retake()
   on a new one: the session lock taken back if free and the row renewed in one statement;
   held by a contender's session for the moment, "try again" while the row is still ours
   (holds()). res OURS, LOSTLOCK or CONTENDED. */
inline renew(h, r) {
#ifdef ADVISORY
    if
    :: sess == h + 1 -> res = (RENEWS(h, r) && KEEPS)
    :: sess == 0 ->
        res = (RENEWS(h, r) && KEEPS);
        if :: res == OURS -> sess = h + 1 :: else -> skip fi
    :: sess != 0 && sess != h + 1 ->
        if
        :: OWN(h, r) && !P.rel && !EXPIRED && KEEPS -> res = CONTENDED
        :: else -> res = LOSTLOCK
        fi
    fi;
#else
    res = (RENEWS(h, r) && KEEPS);
#endif
    REACHED(5, res == CONTENDED);
    REACHED(11, res != OURS && OWN(h, r) && !KEEPS_R3);
    if
    :: res == OURS -> renewed(true)
    :: else -> skip
    fi
}

/* finish() with p_keep: the row renewed for the next attempt (no session lock involved). */
inline keep(h, r) {
    res = (RENEWS(h, r) && KEEPS);
    REACHED(11, res != OURS && OWN(h, r) && !KEEPS_R3);
    if
    :: res == OURS -> renewed(false)
    :: else -> released(h, r)     /* not kept: released, if still the caller's */
    fi
}

/* start_run(): a further attempt's start, under a lock the caller still holds. */
inline start_run(h, r) {
    res = (OWN(h, r) && !P.rel && !EXPIRED && KEEPS)
}

/* release() / finish() without keep; the advisory session closes after. */
inline release(h, r) {
    released(h, r);
#ifdef ADVISORY
    if :: sess == h + 1 -> sess = 0 :: else -> skip fi
#endif
}

/* The command's start, and the properties. */
inline fork(h) {
    printf("MSC: t=%d host%d starts its command (attempt %d), token %d\n", clk, h, att + 1,
           tok);
    assert(!H[1 - h].running);                                      /* held by two */
    assert(tok > started_tok || tok == started_tok && started_by == h * 4 + r);  /* tokens */
    REACHED(1, H[1 - h].ran);
    REACHED(8, att == 1);
#if PROBE == 13 || defined(PROBES)
    REACHED(13, tl_now == 2 && (ranp >> (1 - h)) & 1);
#endif
    started_tok = tok; started_by = h * 4 + r;
#if PROBE == 2 || defined(PROBES)
    beats = 0;
#endif
#ifdef KILL_FROM_FORK
    H[h].since = 0;
#endif
    H[h].running = 1; H[h].ran = 1
}

/* A statement lost, before it ran or its answer after: a fault, or free on a broken
   connection. The host reconnects for its next one; in advisory mode its session ends with
   the old one (and the session lock with it). */
#define LOSABLE (H[h].brk || faults < FAULTS)
#define REPLY_LOSABLE (!H[h].brk && faults < FAULTS)
#ifdef ADVISORY
#define SESSION_ENDS if :: sess == h + 1 -> sess = 0 :: else -> skip fi
#else
#define SESSION_ENDS skip
#endif
#define LOSE excused = 1; if :: !H[h].brk -> faults++ :: else -> skip fi; H[h].brk = 0; \
    SESSION_ENDS

/* The local deadline of the last confirmation (its send + horizon - margin - grace), on a
   stopwatch that may read short. */
#define BEFORE_DEADLINE (H[h].since < LOST(h) + SHORT(h))
#define PAST_DEADLINE (H[h].since >= LOST(h))
/* R4: a confirmation counts only if answered before the previous one's local deadline
   (heartbeat.in_time: the renewal, one in the backoff, finish with keep, the retake after a
   cut, the renewal before a further attempt's fork). It runs, and is answered, at the tick
   it is sent (the header says why that is enough). */
#if defined(NO_R4)
#define ON_TIME true
#define LATE false
#elif defined(R4_STRICT)
#define ON_TIME BEFORE_DEADLINE
#define LATE PAST_DEADLINE
#else
/* ... or, answered later, while the server answering still writes the timeline the lock
   was taken on (the token's high bits: lease.taken_on_this_timeline): then no promotion
   came between, and the row being still the caller's means nobody took it over. */
#define OWN_TIMELINE (tl_now == tok / 32)
#define ON_TIME (BEFORE_DEADLINE || OWN_TIMELINE)
#define LATE (PAST_DEADLINE && !OWN_TIMELINE)
#endif
#define CONFIRMED H[h].since = 0
#ifdef NO_START_CHECK
#define TOO_LATE_TO_START false
#else
#define TOO_LATE_TO_START (H[h].since > START(h) + SHORT(h))
#endif
#define T clk, h
#define h _pid              /* the host: Pglock's processes are the first two */

/* One host: pglock's main thread, its heartbeat and the statements they send
   (pglock/run/slot.py, pglock/run/keeping.py, pglock/lock/heartbeat.py). */
active [NH] proctype Pglock() {
    unsigned r : 2 = 0;     /* invocation */
    byte tok = 0;           /* the token of the claim */
    bit att = 0;            /* 1: the further attempt */
    bit once = 0;           /* R6: the acquire tried again after waiting out the wait */
    bit told = 0;           /* R6: the wait told (promotion_wait) ends at the long ttl */
    unsigned res : 2 = 0;   /* the answer of the statement running (0 between steps) */

    started;
idle:
    atomic {
        H[h].hold = 0; H[h].since = 0; H[h].brk = 0; tok = 0; att = 0; once = 0; told = 0;
        if
        :: r < (h == 0 -> RUNS : RUNS1) -> r++
        :: else -> H[h].done = 1;
            /* progress: when every invocation is over, a command ran, or the skip is
               explained by a lost statement or a host late for a deadline */
            assert(!H[1 - h].done || H[0].ran || H[1].ran || excused);
            goto dead
        fi
    };

sending:                    /* Slot.acquire */
#ifdef ADVISORY
    /* advisory.try_acquire: take() (the session lock; R7's eviction is the Cluster's
       session end), then acquire; a loser gives the session lock back. A holder's retake
       in between finds the lock contended. */
    if
    :: atomic { !H[h].brk && sess == 0 -> sess = h + 1;
          printf("MSC: t=%d host%d: acquire takes the session lock (run %d)\n", T, r) }
    :: atomic { !H[h].brk && sess != 0 ->
          printf("MSC: t=%d host%d: acquire finds the session lock held, exits 75\n", T) };
        goto over
    :: atomic { LOSABLE -> LOSE; printf("MSC: t=%d host%d: acquire lost\n", T) }; goto cut
    fi;
#endif
    if
    :: atomic { !H[h].brk -> acquire(h, r);
          printf("MSC: t=%d host%d: acquire (run %d) runs: %d\n", T, r, res);
          if
          :: res == WON -> res = 0; H[h].hold = 1; CONFIRMED;
              REACHED(10, once); goto starting
          :: res == HELD -> SESSION_ENDS;
              printf("MSC: t=%d host%d exits 75\n", T); goto over
#ifdef NO_R6
          :: res == WAIT -> SESSION_ENDS; res = 0; goto over
#else
          :: res == WAIT -> SESSION_ENDS; res = 0; goto waiting
#endif
          fi }
    :: atomic { REPLY_LOSABLE -> acquire(h, r); res = 0; LOSE;
          printf("MSC: t=%d host%d: acquire runs, its answer lost\n", T) }; goto cut
    :: atomic { LOSABLE -> LOSE; printf("MSC: t=%d host%d: acquire lost\n", T) }; goto cut
    fi;
waiting:                    /* R6: the wait's end told, waited for (plus a jitter), and one
                               try more. The code waits out a refusal again too (a later
                               promotion's own wait); with one promotion there is none: a
                               refusal after waiting is unreachable (checked by hand) */
    atomic { seen_age >= (told -> TTL_L : TTL_S) -> once = 1; told = 0 };
    goto sending;
cut:                        /* a cut acquire is sent again within --connect-timeout */
    if
    :: goto sending
    :: goto over
    fi;

starting:                   /* Slot.start -> Child.spawn: the check before the fork */
    atomic {
        if
        :: TOO_LATE_TO_START -> excused = 1;
            printf("MSC: t=%d host%d: start deadline passed, not started\n", T);
            goto releasing
        :: else -> fork(h)
        fi
    };

holding:                    /* Heartbeat._loop and Supervision.wait */
    if
    :: atomic { H[h].running && H[h].since >= IV(h) && !H[h].brk -> renew(h, r);
          REACHED(3, res == OURS && P.tl < tl_now);
          printf("MSC: t=%d host%d: renewal runs: %d\n", T, res);
          if
          :: ON_TIME && res == OURS -> res = 0; REACHED(17, PAST_DEADLINE); CONFIRMED;
#if PROBE == 2 || defined(PROBES)
              beats++; REACHED(2, beats >= 2);
#endif
              goto holding
          :: ON_TIME && res == CONTENDED -> res = 0; goto holding
          :: ON_TIME && res == LOSTLOCK -> goto stopping
          :: LATE -> res = 0; excused = 1; REACHED(12, true);
              printf("MSC: t=%d host%d: answered past the deadline (R4): lost\n", T);
              goto stopping
          fi }
    :: atomic { H[h].running && H[h].since >= IV(h) && REPLY_LOSABLE -> renew(h, r);
          res = 0; LOSE; printf("MSC: t=%d host%d: renewal runs, its answer lost\n", T) };
        goto holding
    :: atomic { H[h].running && H[h].since >= IV(h) && LOSABLE -> LOSE;
          printf("MSC: t=%d host%d: renewal lost\n", T) }; goto holding
    :: atomic { H[h].running -> H[h].running = 0;
          printf("MSC: t=%d host%d: the command ends\n", T);
          if :: att == 0 -> goto keeping :: goto releasing fi }
    :: atomic { H[h].running && PAST_DEADLINE -> H[h].running = 0;
          printf("MSC: t=%d host%d: past its deadline, pglock stops the command\n", T);
          goto releasing }
    :: atomic { !H[h].running -> goto releasing }       /* the watchdog killed it */
    fi;
stopping:                   /* lock lost: SIGTERM, SIGKILL a grace later; or the watchdog's */
    if
    :: atomic { H[h].running -> H[h].running = 0;
          printf("MSC: t=%d host%d: lock lost, command stopped\n", T) }
    :: atomic { !H[h].running -> skip }
    fi;
    goto releasing;

keeping:                    /* record_end(then="keep"): finish with p_keep, sent again every
                               second until given up (then released) */
    if
    :: atomic { !H[h].brk -> keep(h, r);
          printf("MSC: t=%d host%d: finish (keep) runs: %d\n", T, res);
          if
          :: ON_TIME && res == OURS -> res = 0; CONFIRMED; goto backoff
          :: ON_TIME && res != OURS -> res = 0; goto over   /* lost: no further attempt */
          :: LATE -> res = 0; excused = 1; REACHED(12, true);
              printf("MSC: t=%d host%d: answered past the deadline (R4): lost\n", T);
              goto releasing
          fi }
    :: atomic { REPLY_LOSABLE -> keep(h, r); res = 0; LOSE;
          printf("MSC: t=%d host%d: finish (keep) runs, its answer lost\n", T) }
    :: atomic { LOSABLE -> LOSE; printf("MSC: t=%d host%d: finish (keep) lost\n", T) }
    fi;
    if
    :: goto keeping
    :: goto releasing
    fi;

backoff:                    /* Slot.back_off -> keeping.hold_through */
    if
    :: atomic { BEFORE_DEADLINE && H[h].since >= IV(h) && !H[h].brk -> renew(h, r);
          printf("MSC: t=%d host%d: renewal (backoff) runs: %d\n", T, res);
          if
          :: ON_TIME && res == OURS -> res = 0; CONFIRMED; goto backoff
          :: ON_TIME && res == CONTENDED -> res = 0; goto backoff
          :: ON_TIME && res == LOSTLOCK -> res = 0; goto over
          :: LATE -> res = 0; excused = 1; goto over
          fi }
    :: atomic { BEFORE_DEADLINE && H[h].since >= IV(h) && REPLY_LOSABLE -> renew(h, r);
          res = 0; LOSE }; goto backoff
    :: atomic { BEFORE_DEADLINE && H[h].since >= IV(h) && LOSABLE -> LOSE }; goto backoff
    :: atomic { BEFORE_DEADLINE -> skip }; goto recording   /* the retry delay is over */
    :: atomic { PAST_DEADLINE -> excused = 1;
          printf("MSC: t=%d host%d: lost while waiting to retry\n", T) }; goto over
    fi;

recording:                  /* Slot._record_start: start_run, sent again after a cut */
    if
    :: atomic { !H[h].brk -> start_run(h, r);
          printf("MSC: t=%d host%d: start_run runs: %d\n", T, res);
          if
          :: res == 1 -> res = 0; goto confirm
          :: else -> REACHED(16, true); goto releasing     /* no longer held */
          fi }
    :: atomic { LOSABLE -> LOSE; printf("MSC: t=%d host%d: start_run lost\n", T) }
    fi;
    if                      /* within --connect-timeout of the cut, or given up (released) */
    :: goto releasing
#ifdef ADVISORY
    :: skip                 /* _reconnected: the session lock taken back first (retake) */
#else
    :: goto recording
#endif
    fi;
#ifdef ADVISORY
retaking:
    if
    :: atomic { !H[h].brk -> renew(h, r);
          printf("MSC: t=%d host%d: retake runs: %d\n", T, res);
          if
          :: ON_TIME && res == OURS -> res = 0; CONFIRMED; REACHED(14, true);
              goto recording
          :: ON_TIME && res == CONTENDED -> res = 0; goto retaking
          :: ON_TIME && res == LOSTLOCK -> res = 0; goto over
          :: LATE -> res = 0; excused = 1; goto over
          fi }
    :: atomic { REPLY_LOSABLE -> renew(h, r); res = 0; LOSE }; goto retaking
    :: atomic { LOSABLE -> LOSE }; goto retaking
    :: goto releasing
    fi;
#endif

confirm:                    /* Slot._confirm, when the last confirmation is an interval old */
    if
    :: atomic { H[h].since < IV(h) -> goto start2 }
    :: atomic { H[h].since >= IV(h) && !H[h].brk -> renew(h, r);
          printf("MSC: t=%d host%d: renewal (before the fork) runs: %d\n", T, res);
          if
          :: ON_TIME && res == OURS -> res = 0; CONFIRMED; goto start2
          :: ON_TIME && res == CONTENDED -> res = 0; goto start2 /* the last one stands */
          :: ON_TIME && res == LOSTLOCK -> res = 0; goto releasing
          :: LATE -> res = 0; excused = 1; goto releasing
          fi }
    :: atomic { H[h].since >= IV(h) && REPLY_LOSABLE -> renew(h, r); res = 0; LOSE };
        goto start2
    :: atomic { H[h].since >= IV(h) && LOSABLE -> LOSE }; goto start2
    fi;
start2:
    atomic {
        att = 1;
        if
        :: TOO_LATE_TO_START -> excused = 1;
            printf("MSC: t=%d host%d: start deadline passed, not started\n", T);
            goto releasing
        :: else -> fork(h)
        fi
    };
    goto holding;

releasing:                  /* finish, or release: sent again until given up */
    if
    :: atomic { !H[h].brk -> H[h].hold = 0; H[h].since = 0; release(h, r);
          printf("MSC: t=%d host%d: release runs\n", T) }; goto over
    :: atomic { LOSABLE -> LOSE; H[h].hold = 0; H[h].since = 0;
          printf("MSC: t=%d host%d: release lost\n", T) }
    fi;
    if
    :: goto releasing
    :: goto over
    fi;
over:
    goto idle;
dead:
    skip
}

/* A tick of the server clock. Each watchdog first kills a command whose deadline has come
   (time cannot pass it with the command alive); then every count moves on. */
#undef h
inline tick(h) {
    if
    :: H[h].running && H[h].since >= KILL(h) ->
        H[h].running = 0;
        REACHED(9, true);
        printf("MSC: t=%d host%d's watchdog kills the command\n", clk, h)
    :: else -> skip
    fi;
    if :: H[h].hold && H[h].since < CAP -> H[h].since++ :: else -> skip fi
}

active proctype Clock() {
    do
    :: atomic {
        !(H[0].done && H[1].done);      /* (then nothing more can happen) */
        tick(0); tick(1);
        down(P.left); down(P.stop);
        down(S.left); down(S.stop);
        if :: promoted && seen && seen_age < MAXTTL -> seen_age++ :: else -> skip fi;
        clk++
       }
    od
}

/* The cluster: replication, one failover, and (advisory) one restart and one session ended
   under its holder (R7's eviction, a proxy's reset, a terminated backend). */
active proctype Cluster() {
    atomic {
#ifdef SYNC_TOO
        if
        :: async = 0
        :: async = 1
        fi;
#else
        async = 1;
#endif
#ifdef PAST_ROW
        /* R5's assumption: the job ran with each host's ttl before, and it was replicated */
        P.holder = 3; P.ctr = 1; P.tl = 1; P.itl = 1; P.rel = 1; P.ttl = 1; P.longest = 1;
        copy(S, P);
#endif
        printf("MSC: replication asynchronous: %d\n", async);
        started = 1
    };
    do
    :: H[0].done && H[1].done -> break
    :: atomic { async && !promoted && DIFFER -> copy(S, P);  /* the standby catches up */
          printf("MSC: t=%d the standby replays the primary's row\n", clk) }
    :: atomic { !promoted ->
        promoted = 1;
        copy(P, S);                                         /* unreplicated writes lost */
        clear(S);                   /* a second promotion is not modelled: no standby */
        tl_now = 2; seen = 0; seen_age = 0; sess = 0;
#if PROBE == 13 || defined(PROBES)
        ranp = H[0].running + 2 * H[1].running;
#endif
        H[0].brk = 1; H[1].brk = 1;
        printf("MSC: t=%d the standby is promoted, timeline 2\n", clk) }
#if defined(ADVISORY) && defined(RESTART)
    :: atomic { !restarted ->
        restarted = 1; life = 1; sess = 0;
        H[0].brk = 1; H[1].brk = 1;
        printf("MSC: t=%d the server restarts\n", clk) }
#endif
#ifdef ADVISORY
    :: atomic { !terminated && sess != 0 ->
        terminated = 1;
        printf("MSC: t=%d host%d's session ends\n", clk, sess - 1);
        H[sess - 1].brk = 1;
        sess = 0 }
#endif
    od
}

