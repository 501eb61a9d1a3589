/*
 * PostgreSQL lease mode (mode=lease): tokens follow grant order, and mutual exclusion under the
 * expiry rule. Checked exhaustively by scripts/model-check.sh; docs/PROTOCOLS.md ("Lease mode",
 * "Model") says what is covered and what is abstracted.
 *
 * What is modelled (each step names the code it abstracts):
 *  - One key: its row of fencelock_leases (absent until the first acquire inserts it, and after
 *    a delete; then the acquisition whose grant it holds, or none, and whether it is unexpired)
 *    and the sequence fencelock_tokens.
 *    Each statement is its own transaction; its steps run atomically on the server, in any order
 *    against other statements (a statement blocked on the row lock or on the unique index of a
 *    concurrent INSERT simply runs its next step later).
 *  - lease_acquire.sql as one server step: `INSERT .. VALUES (name, '', 0, 'epoch', NULL) ON
 *    CONFLICT (name) DO UPDATE SET owner, token = nextval(..), expires_at, holder WHERE
 *    l.expires_at <= clock_timestamp() RETURNING token`. A missing row gets an expired
 *    placeholder (token 0, no owner: no grant, the answer says token 0); an existing row is
 *    locked, and only when it is expired is the token drawn and the grant made; an unexpired
 *    row answers "held". The client runs the statement again after a placeholder answer, within
 *    the same try, up to PLACEHOLDER_RUNS runs (postgres_backend.cpp kPlaceholderRuns: the run
 *    that finds the row missing for the PLACEHOLDER_RUNS-th time ends the try, Unavailable).
 *    VALUES_TOKEN (below) is the statement before, as two steps.
 *  - 2 clients; client c makes up to A0, A1 acquisitions (ClientCore::acquire_as_head: a fresh
 *    OwnerId::random() per acquisition). An acquisition makes up to TRIES tries with its owner
 *    id (wait_loop.cpp acquire_with_release_events: a try after a "held" answer, on a release
 *    notification or the holder's remaining time, both abstracted to "any later moment").
 *  - Every statement is delivered at any later moment or never (a statement that runs out of
 *    io_timeout is cancelled with PQcancel and its connection dropped; the cancel may not reach
 *    the server, so the statement may still run; a crash of the server, with durable commits,
 *    just ends the statements it had not run). The client may stop waiting for a reply at any
 *    moment: an ambiguous try (postgres_backend.cpp LeaseBackend::try_acquire, no answer in
 *    time) sends lease_release_unknown.sql and the acquisition fails. Its statement may still
 *    run later (a late run), before or after that release, or never.
 *  - Run ids: every run of lease_acquire.sql carries its own id (OwnerId::random() per run),
 *    here the pair (acquisition, number of the run within it: stmt_run). lease_release_unknown.sql
 *    as one server step, under the row lock: a missing row is inserted as the expired
 *    placeholder; a row that holds this owner's grant is freed (owner '', expires_at 'epoch');
 *    either way the run id is recorded in the row's `released` map (rec). The acquire's DO UPDATE
 *    branch (the only one that grants) refuses a recorded run. The records belong to the row: a
 *    delete (an admin's, or DELETE_ON_RELEASE) drops them. They are kept until then: a run that
 *    arrives after its record's time (max(ttl, one minute)) has passed is not modelled. Not
 *    modelled either: the one retry of a try whose connection died (a new run, with a new run id,
 *    after the release of the first run has completed).
 *  - Time: the row may expire at any moment; its expiry means that the validity of the grant it
 *    holds has ended (the expiry rule: expires_at = the server's clock_timestamp() + ttl at the
 *    grant, the client's validity = send time + ttl - drift, renewals move both under the same
 *    owner compare). The client's own check `Clock::now() >= validity` after a grant may fail
 *    (it then releases and fails). Nothing else depends on clocks (but EARLY_EXPIRY below).
 *  - Client crashes: a client that takes no further step (every other process moves
 *    independently of it, so no explicit crash transition is needed); a holder may also keep
 *    its grant and never release it.
 *  - Faults outside the expiry rule, each bounded (the configurations below choose them):
 *    ADMIN_DELETES: an admin's `DELETE FROM fencelock_leases WHERE name = K` at any moment, up
 *    to DELETES times (whatever the row holds: a grant, an expired row, a placeholder).
 *    EARLY_EXPIRY: the server's clock steps forward at any moment, up to STEPS times, so that
 *    an unexpired row counts as expired (clock_timestamp() decides expiry) while the validity
 *    of the grant it holds, measured on the client's clock, has not ended. A holder whose row
 *    was deleted or expired early is usurped: it still believes it holds, and the next grant
 *    may come while it does (renewals, abstracted, would tell it at the next round). MUTEX does
 *    not count usurped grants (fencing covers that gap); ORDER counts every grant.
 *
 * Abstracted away: renewals (lease_renew.sql extends only an unexpired row of the same owner;
 * one that fails reports the lease lost, which only weakens MUTEX), the LISTEN connection (a
 * wake-up only makes a waiter try again, at a moment the model picks anyway), holder metadata,
 * reconnect back-off, other keys (the sequence is shared by all keys; draws for other keys only
 * skip numbers).
 *
 * Invariants (ORDER and MUTEX asserted when a client sees its grant):
 *  - ORDER: the token exceeds the token of every grant that had completed (its client saw it)
 *    before the server granted this one; no two grants share a token.
 *  - MUTEX: no other client holds a grant whose validity has not ended, unless that grant was
 *    usurped (an admin's delete or a clock step took its row); not asserted for a grant that
 *    was itself usurped before its client saw it.
 *  - NO_LATE_GRANT (asserted when the server grants): no grant to a run after the
 *    lease_release_unknown.sql of that run has run, i.e. once an ambiguous try was released, its
 *    late run takes nothing, and the row never again holds the grant of an acquisition that
 *    gave up (a lock held by nobody until its TTL ends). Asserted where no row is ever deleted
 *    (no ADMIN_DELETES, no DELETE_ON_RELEASE): a delete drops the records (the escape
 *    docs/PROTOCOLS.md names), and ASSERT_NO_LATE_GRANT with ADMIN_DELETES shows it.
 *
 * Variants, each a real defect or a documented assumption; each must be caught (but
 * DELETE_ON_RELEASE alone, which must pass):
 *  - NO_RELEASED_RECORD: lease_release_unknown.sql frees the row but records no run id (the code
 *    before run ids): a late run after the release is granted (NO_LATE_GRANT).
 *  - ASSERT_NO_LATE_GRANT: NO_LATE_GRANT asserted also with admin deletes: a delete after the
 *    release drops the record, a placeholder insert makes the row again, and the late run is
 *    granted (the documented escape).
 *  - VALUES_TOKEN: the acquire statement before commit eaaea29, `INSERT .. VALUES (.., nextval(..),
 *    ..) ON CONFLICT (name) DO UPDATE SET .., token = nextval(..), .. WHERE expired`, as two
 *    server steps: the VALUES row's nextval() is drawn when the statement starts (before the row
 *    exists or is locked); the conflict resolution is one step later, and a missing row is
 *    inserted as a grant with that early token. Once a row can go missing after a grant (an
 *    admin's delete, or DELETE_ON_RELEASE) a statement that drew its token before a faster
 *    grant inserts it after that grant's row went: a token below a completed grant's.
 *  - DELETE_ON_RELEASE: release deletes the row instead of marking it expired. Caught with
 *    VALUES_TOKEN (why lease_release.sql keeps rows); with the current statement it passes,
 *    also with admin deletes and clock steps: every token is drawn under the row lock, whether
 *    the row was deleted before or not (NO_LATE_GRANT is not asserted there: a release that
 *    deletes the row drops its records, as an admin's delete does).
 *  - REUSE_OWNER: one owner id for all acquisitions of a client. A delayed release of an
 *    acquisition that failed ambiguously frees the client's later grant, and another client is
 *    granted while it holds.
 *  - ASYNC_COMMIT: commits are acknowledged before they are durable (synchronous_commit = off,
 *    which every fencelock connection overrides) and the server crashes: it comes back with the
 *    state of its last WAL flush, and a token is granted twice (the documented assumption that
 *    commits are durable; tests/conformance/postgres_integration_test.cpp shows it for real).
 *
 * Bound: every run is finite (at most A0 + A1 acquisitions of at most TRIES tries of at most
 * PLACEHOLDER_RUNS runs, each statement (acquire or release) runs at most once, at most one crash, DELETES deletes
 * and STEPS clock steps), so the search is exhaustive within DEPTH; scripts/model-check.sh
 * passes -m DEPTH and fails if pan reports it too small.
 */
#define DEPTH 2000

#ifndef A0
#define A0 2
#endif
#ifndef A1
#define A1 2
#endif
#ifndef TRIES
#define TRIES 2
#endif
#ifndef PLACEHOLDER_RUNS
#define PLACEHOLDER_RUNS 4 /* postgres_backend.cpp kPlaceholderRuns */
#endif
/* Faults outside the expiry rule (see above): how many of each. */
#ifndef DELETES
#ifdef ADMIN_DELETES
#define DELETES 2
#else
#define DELETES 0
#endif
#endif
#ifndef STEPS
#ifdef EARLY_EXPIRY
#define STEPS 2
#else
#define STEPS 0
#endif
#endif
#define CLIENTS 2
/* NO_LATE_GRANT is asserted where no row is ever deleted (or when asked to). */
#if (DELETES == 0 && !defined(DELETE_ON_RELEASE)) || defined(ASSERT_NO_LATE_GRANT)
#define CHECK_LATE 1
#endif
#define NATT (A0 + A1) /* acquisition ids 1..NATT; 0 = none */
#define FIRST(c) ((c) == 0 -> 1 : A0 + 1)
#define ATTEMPTS(c) ((c) == 0 -> A0 : A1)
#define OWNER(a) ((a) <= A0 -> 0 : 1)

/* The owner id written by acquisition a and compared by its release. REUSE_OWNER: one per
 * client. */
#ifdef REUSE_OWNER
#define VAL(a) (OWNER(a) + 1)
#else
#define VAL(a) (a)
#endif

/* A release of an acquisition that has ended can only free a row that holds that ended
 * acquisition's grant (owner ids are distinct): the very step the expiry rule allows at any
 * moment for a row whose grant nobody holds (expires_at = 'epoch', owner = ''). So with distinct
 * owners and rows kept, releases are not sent: a state-space reduction that removes no
 * behaviour. */
#if defined(REUSE_OWNER) || defined(DELETE_ON_RELEASE)
#define SEND_RELEASES 1
#endif
/* (The same holds with admin deletes and clock steps: they take rows, and a release still only
 * frees a row whose grant nobody holds.) */

/* The row of the key (fencelock_leases WHERE name = key). */
bool row = 0;      /* it exists */
byte row_att = 0;  /* the acquisition whose grant it holds (owner = VAL(row_att)); 0 none */
bool row_live = 0; /* expires_at > clock_timestamp() */
byte seq = 0;      /* fencelock_tokens: the last value drawn */
/* The row's `released` map: rec[a] = the number of the run of acquisition a recorded there, 0
 * none (an acquisition releases at most one run as unknown: it ends there). */
byte rec[NATT + 1];

#ifdef ASYNC_COMMIT
/* The state as of the last WAL flush: what a crash comes back with. */
bool d_row = 0;
byte d_row_att = 0;
bool d_row_live = 0;
byte d_seq = 0;
byte d_rec[NATT + 1];
bool crashed = 0;
#if NATT == 4
#define REC_DIRTY (d_rec[1] != rec[1] || d_rec[2] != rec[2] || d_rec[3] != rec[3] || d_rec[4] != rec[4])
#elif NATT == 3
#define REC_DIRTY (d_rec[1] != rec[1] || d_rec[2] != rec[2] || d_rec[3] != rec[3])
#elif NATT == 2
#define REC_DIRTY (d_rec[1] != rec[1] || d_rec[2] != rec[2])
#else
#define REC_DIRTY 1
#endif
#endif

/* Statements in flight, per acquisition (one at a time: a try starts after the previous try's
 * answer was read, and an acquisition that ended ambiguously makes no more). */
byte stmt[NATT + 1]; /* 0 none; 1 sent; 2 (VALUES_TOKEN) its VALUES nextval() drawn */
byte stmt_run[NATT + 1]; /* its run id: the number of the run within acquisition a (1, 2, ..) */
#ifdef VALUES_TOKEN
byte stmt_v[NATT + 1]; /* that VALUES token */
#endif
bool rel[NATT + 1]; /* lease_release.sql with this acquisition's owner id */
bool relu[NATT + 1];     /* lease_release_unknown.sql with its owner id and the run id: */
byte relu_run[NATT + 1]; /* the number of that run */

/* Answers that came while the client still waits for them. */
bool waiting[NATT + 1];
byte answer[NATT + 1]; /* 0 none; 1 granted; 2 held by another owner; 3 placeholder (token 0) */
byte answer_tok[NATT + 1];

/* live[a]: acquisition a is in progress or its grant is held. over[a]: its validity has ended
 * (the expiry rule). usurped[a]: its grant's row was deleted or expired early while its
 * validity had not ended. All reset when it ends. */
bool live[NATT + 1];
bool over[NATT + 1];
bool usurped[NATT + 1];

/* Faults used so far. */
byte deletes = 0;
byte steps = 0;

/* Observer state for the invariants. */
byte holding[CLIENTS];          /* the acquisition whose grant the client holds, 0 none */
byte max_done = 0;              /* the largest token of the grants completed so far */
byte done_at_grant[NATT + 1];   /* max_done when the server granted acquisition a */
int tokens_granted = 0;         /* bit t: token t was granted (and seen) */
bool late[NATT + 1];            /* the release of a's run in flight has run: the run is late */

/* Acquisition a has ended: nobody holds its grant. */
inline forget(a) {
  live[a] = 0;
  over[a] = 0;
  usurped[a] = 0;
  waiting[a] = 0;
  answer[a] = 0;
  answer_tok[a] = 0;
  done_at_grant[a] = 0
}

/* It failed, or its grant was released (lease_release.sql, when sent). */
inline retire(a) {
  forget(a);
#ifdef SEND_RELEASES
  rel[a] = 1
#else
  skip
#endif
}

/* Its try ended without an answer in time: lease_release_unknown.sql with the id of the run
 * it sent last (always sent: the record matters). Every earlier run of a has executed (its
 * answer was read) and a sends no more, so that run is the only one of a that a record can still
 * meet: its number is renamed to 1 here, in the statement (if it has not run yet) and in the
 * release alike. A renaming of one id everywhere changes no comparison; it keeps the number of
 * the run from multiplying the states after its client has moved on. */
inline retire_unknown(a) {
  forget(a);
  if
  :: stmt[a] != 0 -> stmt_run[a] = 1
  :: else -> skip
  fi;
  relu[a] = 1;
  relu_run[a] = 1
}

/* The server grants acquisition a (NO_LATE_GRANT: not after the release of this run). */
inline check_late(a) {
#ifdef CHECK_LATE
  assert(!late[a])
#else
  skip
#endif
}

/* The row is deleted: its `released` records go with it. */
inline drop_records() {
  t = 1;
  do
  :: t <= NATT -> rec[t] = 0; t++
  :: else -> break
  od;
  t = 0
}

/* The server grants acquisition a the token t: the row holds its grant, unexpired. */
inline grant_row(a) {
  row_att = a;
  row_live = 1;
  if
  :: waiting[a] -> answer[a] = 1; answer_tok[a] = t; done_at_grant[a] = max_done
  :: else -> skip /* nobody waits: a grant that nobody holds, which may expire at once */
  fi
}

inline held(a) {
  if
  :: waiting[a] -> answer[a] = 2 /* RETURNING no row: "held" */
  :: else -> skip
  fi
}

#ifndef VALUES_TOKEN
/* lease_acquire.sql, one step. A missing row: INSERT the expired placeholder (token 0, owner
 * '', expires_at 'epoch'), which RETURNING answers with token 0: no grant. An existing row:
 * ON CONFLICT locks it; when it is expired (WHERE l.expires_at <= clock_timestamp()) the
 * UPDATE draws token = nextval('fencelock_tokens') and grants; otherwise nothing ("held"). */
inline resolve(a) {
  stmt[a] = 0;
  if
  :: !row ->
     row = 1; /* row_att = 0, row_live = 0: expired, nobody's */
     if
     :: waiting[a] -> answer[a] = 3
     :: else -> skip
     fi
  :: row && !row_live && rec[a] != stmt_run[a] -> check_late(a); seq++; t = seq; grant_row(a)
  :: else -> held(a) /* unexpired, or this run is recorded as released */
  fi;
  stmt_run[a] = 0;
  rec[a] = 0; /* no other run of a can come: its record would refuse nothing (not kept) */
  late[a] = 0;
  t = 0
}
#else
/* VALUES_TOKEN, the ON CONFLICT resolution: INSERT the VALUES row with the token drawn when
 * the statement started (a missing row: a grant), or UPDATE an expired row with token =
 * nextval('fencelock_tokens') drawn after the row lock, or nothing when the row is unexpired. */
inline resolve(a) {
  stmt[a] = 0;
  if
  :: !row -> check_late(a); t = stmt_v[a]; row = 1; grant_row(a)
  :: row && !row_live && rec[a] != stmt_run[a] -> check_late(a); seq++; t = seq; grant_row(a)
  :: else -> held(a)
  fi;
  stmt_v[a] = 0;
  stmt_run[a] = 0;
  rec[a] = 0; /* no other run of a can come: its record would refuse nothing (not kept) */
  late[a] = 0;
  t = 0
}
#endif

/* The grant the row holds is taken from its holder behind its back (an admin's delete, a clock
 * step): a holder whose validity has not ended, or an acquisition whose grant is on its way to
 * it, is usurped. The row is left expired and nobody's. */
inline usurp_row() {
  if
  :: row_att != 0 && live[row_att] && !over[row_att] -> usurped[row_att] = 1
  :: else -> skip
  fi;
  row_att = 0;
  row_live = 0
}

/* lease_release.sql: UPDATE .. SET expires_at = 'epoch', owner = '' WHERE name AND owner.
 * DELETE_ON_RELEASE: DELETE .. WHERE name AND owner. */
inline release_stmt(a) {
  rel[a] = 0;
  if
  :: row && row_att != 0 && VAL(row_att) == VAL(a) ->
#ifdef DELETE_ON_RELEASE
     row = 0;
     drop_records();
#endif
     /* (a holder whose row this frees still holds it, as far as it knows) */
     row_att = 0;
     row_live = 0
  :: else -> skip
  fi
}

/* lease_release_unknown.sql: INSERT the expired placeholder with the record where the row is
 * missing; ON CONFLICT lock the row, free it where it holds this owner's grant, and record the
 * run id. NO_RELEASED_RECORD: no record. */
inline release_unknown_stmt(a) {
  relu[a] = 0;
  if
  :: !row -> row = 1 /* expired, nobody's */
  :: row && row_att != 0 && VAL(row_att) == VAL(a) -> row_att = 0; row_live = 0
  :: else -> skip
  fi;
  if
  :: stmt[a] != 0 ->
#ifndef NO_RELEASED_RECORD
     rec[a] = relu_run[a];
#endif
#ifdef CHECK_LATE
     late[a] = 1; /* the run it released is still to come (observer) */
#endif
     skip
  :: else -> skip /* the run has executed: a record would refuse nothing (not kept) */
  fi;
  relu_run[a] = 0
}

#ifdef VALUES_TOKEN
#define RUN(A) \
  :: atomic { stmt[A] == 1 -> seq++; stmt_v[A] = seq; stmt[A] = 2 } \
  :: atomic { stmt[A] == 2 -> resolve(A) } \
  :: atomic { rel[A] -> release_stmt(A) } \
  :: atomic { relu[A] -> release_unknown_stmt(A) }
#else
#define RUN(A) \
  :: atomic { stmt[A] == 1 -> resolve(A) } \
  :: atomic { rel[A] -> release_stmt(A) } \
  :: atomic { relu[A] -> release_unknown_stmt(A) }
#endif

proctype Server() {
  byte t;
end:
  do
  RUN(1)
  RUN(2)
#if NATT >= 3
  RUN(3)
#endif
#if NATT >= 4
  RUN(4)
#endif
#if NATT >= 5
  RUN(5)
#endif
  /* expires_at passes (the expiry rule: the validity of the grant it holds has ended) */
  :: atomic {
       row_live ->
       if
       :: row_att != 0 && live[row_att] -> over[row_att] = 1
       :: else -> skip
       fi;
       row_live = 0;
       row_att = 0
     }
#if DELETES > 0
  /* An admin's DELETE FROM fencelock_leases WHERE name = K. */
  :: atomic { deletes < DELETES && row -> deletes++; usurp_row(); row = 0; drop_records() }
#endif
#if STEPS > 0
  /* The server's clock steps forward: the unexpired row counts as expired now. */
  :: atomic { steps < STEPS && row_live -> steps++; usurp_row() }
#endif
#ifdef ASYNC_COMMIT
  /* The WAL writer flushes: everything committed so far is durable. */
  :: atomic {
       d_row != row || d_row_att != row_att || d_row_live != row_live || d_seq != seq ||
       REC_DIRTY ->
       d_row = row; d_row_att = row_att; d_row_live = row_live; d_seq = seq;
       t = 1;
       do
       :: t <= NATT -> d_rec[t] = rec[t]; t++
       :: else -> break
       od;
       t = 0
     }
  /* An immediate shutdown (a crash) and restart: the unflushed commits are gone, and so is
   * every connection with its statements. The clients' validities run on their own clocks. */
  :: atomic {
       !crashed ->
       crashed = 1;
       row = d_row; row_att = d_row_att; row_live = d_row_live; seq = d_seq;
       t = 1;
       do
       :: t <= NATT ->
          stmt[t] = 0;
          stmt_run[t] = 0;
#ifdef VALUES_TOKEN
          stmt_v[t] = 0;
#endif
          rel[t] = 0;
          relu[t] = 0;
          relu_run[t] = 0;
          late[t] = 0;
          rec[t] = d_rec[t];
          t++
       :: else -> break
       od;
       t = 0
     }
#endif
  od
}

proctype Client(byte c) {
  byte k = 0; /* acquisitions made */
  byte a;     /* this acquisition */
  byte tries;
  byte runs; /* placeholder answers in this try */
  byte token;
  byte i;

end:
  do
  :: k < ATTEMPTS(c) ->
     a = FIRST(c) + k;
     k++;
     tries = 0;
     live[a] = 1;
     do
     :: /* LeaseBackend::try_acquire: run(lease_acquire.sql) under io_timeout; the validity
         * runs from `sent` */
        atomic {
          tries++;
          waiting[a] = 1;
          stmt[a] = 1;
          stmt_run[a] = (tries - 1) * PLACEHOLDER_RUNS + runs + 1 /* a fresh run id */
        }
        /* The answer, or a timeout at a moment of the model's choosing (an answer that came
         * may be missed: the deadline passed first). */
        atomic {
          waiting[a] = 0;
          if
          :: answer[a] == 1 ->
             token = answer_tok[a];
             if
             :: !over[a] -> skip
             :: true -> over[a] = 1 /* `Clock::now() >= validity`: release, DeadlineExceeded */
             fi;
             if
             :: !over[a] ->
                /* ORDER: above every grant completed before the server granted this one */
                assert(token > done_at_grant[a]);
                assert((tokens_granted & (1 << token)) == 0);
                tokens_granted = tokens_granted | (1 << token);
                /* MUTEX: no other client holds a grant whose validity has not ended (but one
                 * whose row an admin's delete or a clock step took) */
                if
                :: !usurped[a] ->
                   i = 0;
                   do
                   :: i < CLIENTS ->
                      assert(i == c || holding[i] == 0 || over[holding[i]] || usurped[holding[i]]);
                      i++
                   :: else -> break
                   od;
                   i = 0
                :: else -> skip
                fi;
                holding[c] = a;
                if
                :: token > max_done -> max_done = token
                :: else -> skip
                fi;
                answer[a] = 0;
                answer_tok[a] = 0;
                done_at_grant[a] = 0
             :: else -> retire(a)
             fi;
             token = 0;
             runs = 0;
             break
          :: answer[a] == 2 && tries < TRIES ->
             answer[a] = 0; /* held: wait for a release or the holder's remaining time */
             runs = 0
          :: answer[a] == 2 ->
             retire(a); /* the wait ran out: give_up() releases by owner id */
             runs = 0;
             break
#ifndef VALUES_TOKEN
          :: answer[a] == 3 && runs + 1 < PLACEHOLDER_RUNS ->
             /* token 0: the row was missing and is now an expired placeholder; the same try
              * runs the statement again (`--attempt; continue`) */
             answer[a] = 0;
             runs++;
             tries--
          :: answer[a] == 3 ->
             /* the row was missing at every run: Unavailable ("deleted again after each of
              * kPlaceholderRuns inserts"); nothing of this acquisition's is on the server */
             retire(a);
             runs = 0;
             break
#endif
          :: true ->
             /* no answer in time (ambiguous): lease_release_unknown.sql for this run, fail */
             retire_unknown(a);
             runs = 0;
             break
          fi
        }
     od;
     if
     :: holding[c] == a ->
        if
        :: atomic {
             /* Lease::release -> LeaseBackend::release: lease_release.sql. The holder stops
              * first (mark_lost), the statement runs at any later moment. */
             holding[c] = 0;
             retire(a)
           }
        :: break /* keeps the grant and never releases it (or crashes): the row expires */
        fi
     :: else -> skip
     fi
  :: else -> break
  od
}

init {
  atomic {
    run Server();
    run Client(0);
    run Client(1)
  }
}
