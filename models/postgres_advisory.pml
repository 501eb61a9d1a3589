/*
 * PostgreSQL advisory mode (the default): tokens follow grant order, no two leases hold the key
 * on live sessions, and the pool leaves no lock behind. Checked exhaustively by
 * scripts/model-check.sh; docs/PROTOCOLS.md ("Advisory mode", "Model") says what is covered and
 * what is abstracted.
 *
 * What is modelled (each step names the code it abstracts):
 *  - One key: which server session holds its session-level advisory lock and how often
 *    (advisory locks stack per session), and the token count (fencelock_advisory_live, one
 *    counter; the epoch that keeps tokens growing across crashes is not modelled here: see
 *    docs/PROTOCOLS.md advisory "Tokens" and tests/conformance/postgres_epoch_test.cpp).
 *  - Three sessions (server backends with their connections): sessions 1 and 2 are the pool of
 *    client 0 (src/postgres/session_pool.h), session 3 the pool of client 1. A session runs one
 *    statement at a time; each statement's server step is atomic.
 *  - Three threads: threads 0 and 1 acquire through client 0 (they share its pool; T0 makes
 *    ACQ0 acquisitions, T1 one), thread 2 through client 1 (ACQ2). Each acquisition is a try
 *    (wait = 0) or a wait, the model's choice.
 *  - Try (advisory_backend.cpp AdvisoryBackend::try_once): an idle session of the client that
 *    does not hold the key (SessionPool::Need::kNotKey); advisory_try.sql in one server step
 *    (pg_try_advisory_lock and, only if granted, nextval). No answer in time (ambiguous): the
 *    statement is cancelled and its results read (recover_after_timeout; the statement then ran
 *    or not), and the key is unlocked on the session as often as it holds it (unlock_fully), or,
 *    if that fails, the session is closed (finish(session, true)).
 *  - Wait (wait_in_queue): an idle session of the client that holds nothing (Need::kEmpty);
 *    pg_advisory_lock, granted by the server when the key is free (or held by the same
 *    session); then advisory_note.sql draws the token, a second statement. A wait that gives up
 *    (lock_timeout, a cancel, io_timeout: at any moment), possibly at the very moment of its
 *    grant, and a note that fails both close the session.
 *  - Release (AdvisoryBackend::release -> unlock_grant): pg_advisory_unlock on the holding
 *    session (a release that finds it busy defers the unlock to the session's next check-in,
 *    before it serves anything: abstracted to one step, as nothing else of this key can run on
 *    it in between).
 *  - Sessions die at any moment (pg_terminate_backend, a restart, a cut), at most DEATHS times:
 *    the server frees every lock of the session at once; its leases learn it at their next
 *    health check (any later moment), a session fencelock closes itself reports them lost at
 *    once (grant.gone). The pool replaces a dead session with a fresh one once nothing uses it.
 *  - Client crashes: a thread that takes no further step; a holder may also keep its grant.
 *
 * Abstracted away: health checks that succeed (they change nothing), holder notes
 * (fencelock_advisory_holders: inspect/list only), other keys (they share the sequence: draws
 * for them only skip numbers; a session holding other keys is covered by "the client's
 * sessions"), the in-process queue of waiters beyond the pool, time (nothing here expires).
 *
 * Invariants:
 *  - ORDER (at each grant a thread sees): the token exceeds the token of every grant that had
 *    completed before the server granted this lock; no two grants share a token.
 *  - MUTEX (same moment): no other lease holds the key on a session that is alive. (A lease on a
 *    session that died holds nothing: the one place where another client can be granted before
 *    lost() fires; fencing tokens carry safety there, docs/PROTOCOLS.md.)
 *  - NO_LEAK (a monitor, in every state): an idle live session holds the key exactly as often
 *    as leases hold it through that session: nothing acquired is left behind in the pool.
 *
 * Variants, each a real defect; each must be caught:
 *  - TOKEN_BEFORE_GRANT: a wait draws its token when it starts waiting, before the grant
 *    (`SELECT nextval(..), pg_advisory_lock(k)`): a waiter that queued before a later grant gets
 *    the smaller token.
 *  - ANY_SESSION: a try may run on a session that holds the key: advisory locks stack, and the
 *    same session grants the key to a second lease of the client while the first holds it.
 *  - KEEP_FAILED_WAIT: a failed wait returns its session to the pool instead of closing it: a
 *    lock granted at the moment of the timeout stays on a session that the pool believes empty.
 *
 * Bound: every run is finite (at most ACQ0 + 1 + ACQ2 acquisitions, one statement each at a
 * time, at most DEATHS deaths, a session reconnects only after a death or close, closes happen
 * only on failed acquisitions), so the search is exhaustive within DEPTH; scripts/model-check.sh
 * passes -m DEPTH and fails if pan reports it too small.
 */
#define DEPTH 3000

#ifndef ACQ0
#define ACQ0 2
#endif
#ifndef ACQ2
#define ACQ2 2
#endif
#ifndef DEATHS
#define DEATHS 2
#endif
#define THREADS 3
#define NACQ(th) ((th) == 0 -> ACQ0 : ((th) == 1 -> 1 : ACQ2))
/* The pool of the thread's client: sessions 1 and 2 (client 0), session 3 (client 1). */
#define IN_POOL(th, s) (((th) < 2 && (s) < 3) || ((th) == 2 && (s) == 3))

/* Statements on a session. */
#define NONE 0
#define TRY 1  /* advisory_try.sql */
#define WAIT 2 /* pg_advisory_lock, waiting */
#define NOTE 3 /* advisory_note.sql */

/* Answers. */
#define GRANTED 1 /* TRY: granted with a token; WAIT: the lock is granted */
#define HELD 2    /* TRY: pg_try_advisory_lock answered false */
#define TOKEN 3   /* NOTE: the token */

/* Server: the key's lock (its session, 0 none, and the stack count) and the sequence. */
byte lock_s = 0;
byte lock_n = 0;
byte seq = 0;
byte deaths = 0;

/* Per session 1..3 (index 0 unused): its server backend lives; checked out by a thread; the
 * pool notes that it holds the key (SessionPool::note_held); the statement it runs and the
 * answer that came while its thread waits. */
bool alive[4];
bool busy[4];
bool holds[4];
byte st[4];
bool waiting[4];
byte ans[4];
byte ans_tok[4];
byte done_at_grant[4]; /* max_done when the server granted the lock on this session */
#ifdef TOKEN_BEFORE_GRANT
byte early_tok[4]; /* the token a wait drew before it was granted */
#endif

/* Leases: the session through which each thread holds the key, 0 none. */
byte lease_s[THREADS];

/* Observer state. */
byte max_done = 0;      /* the largest token of the grants completed so far */
int tokens_granted = 0; /* bit t: token t was granted */

/* The server ends session s's backend: every lock of the session is freed. */
inline server_drop(s) {
  alive[s] = 0;
  if
  :: lock_s == s -> lock_s = 0; lock_n = 0
  :: else -> skip
  fi;
  st[s] = NONE;
  ans[s] = 0;
  ans_tok[s] = 0;
  done_at_grant[s] = 0
}

/* fencelock closes session s (finish(session, true): PQfinish): the backend ends, and the
 * leases on it are lost at once (grant.gone). */
inline close_session(s) {
  server_drop(s);
  busy[s] = 0;
  waiting[s] = 0;
  holds[s] = 0;
  j = 0;
  do
  :: j < THREADS ->
     if
     :: lease_s[j] == s -> lease_s[j] = 0
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  j = 0
}

/* advisory_try.sql on session s: pg_try_advisory_lock($1) and, only if granted, nextval. */
inline run_try(s) {
  st[s] = NONE;
  if
  :: lock_s == 0 || lock_s == s ->
     lock_s = s;
     lock_n++;
     seq++;
     if
     :: waiting[s] -> ans[s] = GRANTED; ans_tok[s] = seq; done_at_grant[s] = max_done
     :: else -> skip
     fi
  :: else ->
     if
     :: waiting[s] -> ans[s] = HELD
     :: else -> skip
     fi
  fi
}

/* pg_advisory_lock($1) is granted (the key is free, or held by this very session). */
inline run_wait(s) {
  st[s] = NONE;
  lock_s = s;
  lock_n++;
  if
  :: waiting[s] -> ans[s] = GRANTED; done_at_grant[s] = max_done
  :: else -> skip
  fi
}

#define SESSION(S) \
  :: atomic { st[S] == TRY && alive[S] -> run_try(S) } \
  :: atomic { st[S] == WAIT && alive[S] && (lock_s == 0 || lock_s == S) -> run_wait(S) } \
  :: atomic { st[S] == NOTE && alive[S] -> \
       st[S] = NONE; seq++; \
       if :: waiting[S] -> ans[S] = TOKEN; ans_tok[S] = seq :: else -> skip fi } \
  :: atomic { alive[S] && deaths < DEATHS -> deaths++; server_drop(S) } \
  :: atomic { /* SessionPool: a dead session nothing uses is replaced by a fresh one */ \
       !alive[S] && !busy[S] && lease_s[0] != S && lease_s[1] != S && lease_s[2] != S -> \
       alive[S] = 1; holds[S] = 0 }

proctype Server() {
end:
  do
  SESSION(1)
  SESSION(2)
  SESSION(3)
  od
}

/* NO_LEAK: an idle live session holds the key as often as leases hold it through it. */
#define LEASES_ON(s) ((lease_s[0] == s) + (lease_s[1] == s) + (lease_s[2] == s))
#define SERVER_HOLDS(s) (lock_s == s -> lock_n : 0)
#define CONSISTENT(s) (!alive[s] || busy[s] || SERVER_HOLDS(s) == LEASES_ON(s))

bool no_leak = 1; /* cleared only by the monitor, at a violation (a readable assertion) */

proctype Monitor() {
end:
  atomic {
    !(CONSISTENT(1) && CONSISTENT(2) && CONSISTENT(3)) ->
    no_leak = 0;
    assert(no_leak)
  }
}

/* Checks the invariants for thread th's grant with token `token` on session s, and records it. */
inline grant(th, s) {
  /* ORDER: above every grant completed before the server granted this lock, and unique */
  assert(token > done_at_grant[s]);
  assert((tokens_granted & (1 << token)) == 0);
  tokens_granted = tokens_granted | (1 << token);
  /* MUTEX: no other lease holds the key on a live session */
  j = 0;
  do
  :: j < THREADS ->
     assert(j == th || lease_s[j] == 0 || !alive[lease_s[j]]);
     j++
  :: else -> break
  od;
  j = 0;
  lease_s[th] = s;
  holds[s] = 1; /* SessionPool::note_held(session, key, true) */
  if
  :: token > max_done -> max_done = token
  :: else -> skip
  fi;
  ans[s] = 0;
  ans_tok[s] = 0;
  done_at_grant[s] = 0;
  token = 0
}

/* Check out an idle session of the thread's pool that satisfies COND(s). */
#define PICK(COND) \
  if \
  :: IN_POOL(th, 1) && alive[1] && !busy[1] && COND(1) -> s = 1 \
  :: IN_POOL(th, 2) && alive[2] && !busy[2] && COND(2) -> s = 2 \
  :: IN_POOL(th, 3) && alive[3] && !busy[3] && COND(3) -> s = 3 \
  fi; \
  busy[s] = 1
#define CAN_PICK(COND) \
  ((IN_POOL(th, 1) && alive[1] && !busy[1] && COND(1)) || \
   (IN_POOL(th, 2) && alive[2] && !busy[2] && COND(2)) || \
   (IN_POOL(th, 3) && alive[3] && !busy[3] && COND(3)))

/* Need::kNotKey (ANY_SESSION: any idle session); Need::kEmpty: holds nothing. */
#ifdef ANY_SESSION
#define NOT_KEY(x) true
#else
#define NOT_KEY(x) (!holds[x])
#endif
#define EMPTY(x) (!holds[x])

proctype Thread(byte th) {
  byte k = 0;  /* acquisitions made */
  byte s;      /* the session checked out */
  byte token;
  byte j;
  bool noted; /* the note was sent */

end:
  do
  :: k < NACQ(th) ->
     k++;
     if
     :: /* a try: AdvisoryBackend::try_once */
        atomic { CAN_PICK(NOT_KEY) -> PICK(NOT_KEY); st[s] = TRY; waiting[s] = 1 }
        atomic {
          waiting[s] = 0;
          if
          :: ans[s] == GRANTED -> token = ans_tok[s]; grant(th, s); busy[s] = 0
          :: ans[s] == HELD -> ans[s] = 0; busy[s] = 0
          :: true ->
             /* no answer in time (or the connection broke): cancelled, its results read; the
              * statement ran or not */
             ans[s] = 0;
             ans_tok[s] = 0;
             done_at_grant[s] = 0;
             if
             :: st[s] == TRY && alive[s] -> run_try(s)
             :: else -> skip
             fi;
             st[s] = NONE;
             if
             :: alive[s] ->
                /* unlock_fully: pg_advisory_unlock as often as pg_locks shows it held */
                if
                :: lock_s == s -> lock_s = 0; lock_n = 0
                :: else -> skip
                fi;
                holds[s] = 0;
                busy[s] = 0
             :: true -> close_session(s) /* could not be brought back */
             fi
          fi
        }
     :: /* a wait: AdvisoryBackend::wait_in_queue */
        atomic {
          CAN_PICK(EMPTY) ->
          PICK(EMPTY);
          st[s] = WAIT;
          waiting[s] = 1;
#ifdef TOKEN_BEFORE_GRANT
          seq++;
          early_tok[s] = seq
#endif
        }
        atomic {
          if
          :: ans[s] == GRANTED ->
             ans[s] = 0;
#ifdef TOKEN_BEFORE_GRANT
             waiting[s] = 0;
             token = early_tok[s];
             early_tok[s] = 0;
             grant(th, s);
             busy[s] = 0
#else
             st[s] = NOTE; /* advisory_note.sql: the token, drawn after the grant */
             noted = 1
#endif
          :: true ->
             /* gives up (lock_timeout, a cancel, io_timeout): PostgreSQL may grant the lock at
              * that very moment, and the statement still fails */
             waiting[s] = 0;
             ans[s] = 0;
             done_at_grant[s] = 0;
#ifdef TOKEN_BEFORE_GRANT
             early_tok[s] = 0;
#endif
             if
             :: st[s] == WAIT && alive[s] && (lock_s == 0 || lock_s == s) -> run_wait(s)
             :: true -> skip
             fi;
             st[s] = NONE;
#ifdef KEEP_FAILED_WAIT
             busy[s] = 0
#else
             close_session(s) /* finish(session, true): frees whatever the wait got */
#endif
          fi
        }
#ifndef TOKEN_BEFORE_GRANT
        if
        :: noted ->
           noted = 0;
           atomic {
             waiting[s] = 0;
             if
             :: ans[s] == TOKEN -> token = ans_tok[s]; grant(th, s); busy[s] = 0
             :: true -> ans[s] = 0; ans_tok[s] = 0; close_session(s) /* the note failed */
             fi
           }
        :: else -> skip
        fi
#endif
     :: else -> skip /* no idle session of the kind: checkout() fails the acquisition */
     fi;
     s = 0;
     if
     :: lease_s[th] != 0 ->
        if
        :: atomic {
             /* Lease::release -> AdvisoryBackend::release: pg_advisory_unlock on the holding
              * session (deferred to its check-in when busy: the same here) */
             s = lease_s[th];
             lease_s[th] = 0;
             if
             :: alive[s] && lock_s == s ->
                lock_n--;
                if
                :: lock_n == 0 -> lock_s = 0
                :: else -> skip
                fi
             :: else -> skip
             fi;
             holds[s] = 0;
             s = 0
           }
        :: atomic {
             /* the health check finds the session gone: lost() */
             lease_s[th] != 0 && !alive[lease_s[th]] -> holds[lease_s[th]] = 0; lease_s[th] = 0
           }
        :: lease_s[th] == 0 -> skip /* lost at once: its session was closed */
        :: break /* keeps the grant and never releases it (or crashes) */
        fi
     :: else -> skip
     fi
  :: else -> break
  od
}

init {
  atomic {
    alive[1] = 1;
    alive[2] = 1;
    alive[3] = 1;
    run Server();
    run Monitor();
    run Thread(0);
    run Thread(1);
    run Thread(2)
  }
}
