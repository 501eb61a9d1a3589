/*
 * etcd: tokens (create revisions) follow grant order, and mutual exclusion under the expiry
 * rule, with sessions that die, own keys deleted by others, requests that arrive late, and
 * deletes that get no answer. Checked exhaustively by scripts/model-check.sh; docs/PROTOCOLS.md
 * ("etcd", "Model") says what is covered and what is abstracted.
 *
 * What is modelled (each step names the code it abstracts; src/etcd/etcd_backend.cpp):
 *  - One lock NAME: its keys NAME/<lease hex>, at most one per session (lease), each with its
 *    create revision; the cluster's revision counter (bumped by every create: deletes bump it
 *    too, which only skips numbers); leases alive or gone. etcd itself is linearizable: every
 *    request is one atomic step.
 *  - Two Clients: client 0 with threads 0 and 1 (they share its session, one per TTL), client 1
 *    with thread 2. Sessions 1, 2 are client 0's (the first and the one that replaces it), 3, 4
 *    client 1's. Thread th makes NACQ(th) acquisitions; a try is a wait that gives up at once,
 *    so every acquisition may wait or give up at each check.
 *  - session_for(): a session whose lease is gone (etcd said so, or its validity passed by the
 *    client's clock, which the expiry rule puts before etcd's expiry) is dropped with its
 *    undeleted keys (drop_undeleted_locked) and a fresh lease granted.
 *  - take_slot(): one acquisition per (session, lock) at a time; a taken slot is kLocked for a
 *    try, a wait waits or runs out. A slot whose own key's delete got no answer (undeleted_) is
 *    settled first.
 *  - create_own_key(): the Txn `if create_revision(own) == 0 then Put(own, lease) +
 *    Range(NAME/) else Range(own)`: created (token = the revision, holder = the oldest key),
 *    a leftover own key (compare-deleted, then one more create), the lease gone (restart on a
 *    fresh session), or no answer (applied or not: the own key's revision is unknown).
 *  - acquire_on(): granted when the own key is the oldest; a try gives up otherwise. A waiter
 *    watches its predecessor, but every wake-up (the DELETE event, a failed stream, its
 *    keep-alive falling due, the deadline) is followed by the same checks, so the model lets it
 *    wake at any moment; then keep_session_alive() (a gone lease restarts), recheck() (own key
 *    there with its revision, else restart; then the oldest key) and the loop again.
 *  - grant(): the validity check (a session whose lease etcd has expired has, by the expiry
 *    rule, no validity left: give up or restart); the token is the own key's create revision.
 *  - give_up() / restart() / release(): drop_own_key(): delete_own_key() is `if
 *    create_revision(own) == revision then Delete(own)`; an own key of unknown revision (an
 *    ambiguous create) is read first and compare-deleted with the revision found. A delete
 *    without an answer is tracked (undeleted_) with its slot taken; settle() retries it (from
 *    take_slot(), and from renew_all() before every keep-alive: the Renewer process), one
 *    settle per session at a time (Session::settling), and frees the slot once it succeeded.
 *  - Requests that get no answer: every write (create, delete) may be applied with its answer,
 *    applied with the answer lost, not applied, or (up to STRAYS times) applied at any later
 *    moment: a request stuck in a member's queue after the client failed over and retried.
 *    Reads are answered or fail (the acquisition gives up). A create may also be answered on
 *    a failover's retry while an earlier try of it goes stray.
 *  - Faults: up to DEATHS session leases end at any moment (etcd's expiry, or a revoke by
 *    session_for()) with their keys; by the expiry rule the grants on that session are over
 *    (their validity ended first). Up to ADMIN keys are deleted by others (`etcdctl del`): their
 *    holders learn it at the next renewal round, after the next waiter may be granted (the gap
 *    docs/PROTOCOLS.md states), so such a holder counts as usurped for MUTEX, not for ORDER.
 *  - Client crashes: a thread that takes no further step; a holder may keep its grant forever.
 *  - sweep_ghosts(): a create without an answer may be applied after its acquisition gave up
 *    (a stray, above), when nothing holds the slot: the key it writes would block the lock
 *    while the session lives. Every such create marks its session (ghost); the Renewer, before
 *    a keep-alive, reads the own key of a marked session whose slot is free, and compare-deletes
 *    the revision it found if the slot stayed free and was not taken in between (its take
 *    count unchanged). Reads that find no key change nothing and are left out.
 *
 * Abstracted away: renewals that succeed (time is abstracted: a session may end at any moment
 * regardless), the renewal round's own-key checks (they only report lost leases, which MUTEX
 * already treats as over), other locks' keys and nested locks (the key filter of
 * first_of_lock), paging of ranges, watch streams (wake-ups at any moment), the local queue of
 * waiters beyond the slot, at most MAXR restarts per acquisition (the code allows 3).
 *
 * Invariants (asserted when a thread sees its grant):
 *  - ORDER: the token exceeds the token of every grant that had completed (its thread saw it)
 *    before the read that decided this grant (the create Txn's Range or the recheck); no two
 *    grants share a token.
 *  - MUTEX: no other thread holds a grant that is not over (released, its session ended) or
 *    usurped (its key deleted by someone else).
 *  - NO_ORPHAN (checked when nothing can move any more: every thread done, no late request
 *    pending, no retry left to make): no own key exists whose slot is free, i.e. that no grant
 *    or pending delete of its Client accounts for; it would hold the lock for nobody.
 *
 * Variants, each a real defect; each must be caught:
 *  - NO_RECHECK: after a wake-up the waiter reads the oldest key but not its own (etcd 3.4's
 *    concurrency.Mutex, Jepsen / etcd-io/etcd#11456): granted once no older key is left, even
 *    when its own key is gone and a later key holds the lock.
 *  - NO_SLOT: two acquisitions of one Client and TTL run at once on the session's one own key:
 *    the second finds the first's key as a leftover and deletes it.
 *  - UNCOMPARED_DELETE: an own key of unknown revision is deleted without a compare (one
 *    settle at a time kept): a delete that reaches etcd late, after a retry succeeded and a
 *    later acquisition on the same session was granted, removes that grant's key (caught with
 *    LATE_REQUESTS; with session deaths alone it passes).
 *  - CONCURRENT_SETTLE: the read and compare-delete kept, but settles of one session may run
 *    at once: one that copied the slot's entry before another settled it reads the key of a
 *    later grant on that slot and compare-deletes it with the revision it just read.
 *  - Both at once are the code before this model (it found them): the next waiter is granted
 *    beside the holder whose key went, until that holder's next renewal round.
 *  - NO_GHOSTS: no sweep (the code before it): a create applied after its acquisition's
 *    give-up read found no key leaves an orphan (caught with LATE_REQUESTS, by NO_ORPHAN).
 *  - NO_RETRY_GHOST: a create whose last try (a failover's retry) was answered is not looked
 *    for afterwards: an earlier try applied after the release leaves an orphan (caught with
 *    LATE_REQUESTS, by NO_ORPHAN; found by an attack on the sweep, not by the model first).
 *  - UNGUARDED_SWEEP: the sweep deletes the key it read without checking that the slot stayed
 *    free: a read that saw a later grant's key deletes it (caught with LATE_REQUESTS).
 *
 * Bound: every run is finite apart from retried settles (a cycle through the same states) and
 * environment steps (bounded by DEATHS, ADMIN, STRAYS), so the search is exhaustive within
 * DEPTH; scripts/model-check.sh passes -m DEPTH and fails if pan reports it too small.
 */
#define DEPTH 4000

/* Configurations: all faults together are too many states for CI (over 135 million states,
 * not finished), so each configuration takes a part of them; scripts/model-check.sh checks
 * each. Thread th makes ACQ<th> acquisitions; thread 1 takes part in TWO_THREADS only.
 *  - SESSION_DEATHS (the default): thread 0 twice, thread 2 once, one session lease ends.
 *  - ADMIN_DELETES: the same acquisitions, one own key deleted by someone else.
 *  - LATE_REQUESTS: the same acquisitions, one write applied at a later moment.
 *  - TWO_THREADS: threads 0, 1 (one session) and 2 once each, no faults: the slot.
 *  - ADMIN_DELETES and LATE_REQUESTS together: the same acquisitions, one own key deleted by
 *    someone else and one write applied at a later moment, in the same run.
 * Every configuration has the writes without answers and the client crashes. */
#if defined(ADMIN_DELETES) && defined(LATE_REQUESTS)
#define ACQ0 2
#define ACQ1 0
#define DEATHS 0
#define ADMIN 1
#define STRAYS 1
#elif defined(ADMIN_DELETES)
#define ACQ0 2
#define ACQ1 0
#define DEATHS 0
#define ADMIN 1
#define STRAYS 0
#elif defined(LATE_REQUESTS)
#define ACQ0 2
#define ACQ1 0
#define DEATHS 0
#define ADMIN 0
#define STRAYS 1
#elif defined(TWO_THREADS)
#define ACQ0 1
#define ACQ1 1
#define DEATHS 0
#define ADMIN 0
#define STRAYS 0
#else /* SESSION_DEATHS, the default */
#define ACQ0 2
#define ACQ1 0
#define DEATHS 1
#define ADMIN 0
#define STRAYS 0
#endif
#define ACQ2 1
#ifndef MAXR
#define MAXR 1
#endif
#ifdef NO_RETRY_GHOST
#define RETRY_GHOST 0
#else
#define RETRY_GHOST 1
#endif
#ifdef CONCURRENT_SETTLE
#define SETTLE_GUARD 0
#else
#define SETTLE_GUARD 1
#endif

#define THREADS 3
#define NACQ(th) ((th) == 0 -> ACQ0 : ((th) == 1 -> ACQ1 : ACQ2))
#define CLIENT(th) ((th) < 2 -> 0 : 1)
#define FIRST_S(c) ((c) == 0 -> 1 : 3)
#define SPARE_S(c) ((c) == 0 -> 2 : 4)
#define UNK 255 /* kUnknownRevision */

/* Writes. */
#define CREATE 1 /* the create Txn's Put (its Range only matters when answered) */
#define CDEL 2   /* if create_revision(own) == r then Delete(own) */
#define UDEL 3   /* Delete(own), no compare (UNCOMPARED_DELETE) */

/* etcd: per session 1..4 (index 0 unused) its lease lives, its own key exists, and the key's
 * create revision. */
byte rev = 0;
bool lalive[5];
bool kex[5];
byte kcr[5];

/* Clients: the current session of each (session_for), and per session its slot of the lock
 * (taken by an acquisition or an undeleted own key), the undeleted own key's revision (0 none,
 * UNK unknown) and whether a settle runs. */
byte cur[2];
bool slot[5];
byte und[5];
bool settling[5];
bool ghost[5];  /* a create without an answer was sent on the session (ghosts_) */
byte takes[5];  /* how often the slot was taken (Ghosts::takes) */

/* Grants: thread th holds one (not over, not usurped), on session hs[th] with token htok[th]. */
bool hold[THREADS];
byte hs[THREADS];
byte htok[THREADS];
int usurped = 0; /* bit t: the key of create revision t was deleted by someone else */

/* Faults and late requests. */
byte deaths = 0;
byte admins = 0;
byte strays = 0;
byte stray_op = 0;
byte stray_s = 0;
byte stray_r = 0;

/* Observer state. */
byte max_done = 0;      /* the largest token of the grants completed so far */
int tokens_granted = 0; /* bit t: token t was granted */

inline apply(op, s, r) {
  if
  :: op == CREATE && lalive[s] && !kex[s] -> rev++; kex[s] = 1; kcr[s] = rev
  :: op == CDEL && kex[s] && kcr[s] == r -> kex[s] = 0
  :: op == UDEL && kex[s] -> kex[s] = 0
  :: else -> skip
  fi
}

/* A write with or without its answer: `answered` says whether the client saw one. */
inline send(op, s, r) {
  if
  :: atomic { true -> apply(op, s, r); answered = 1 }
  :: atomic { true -> apply(op, s, r); answered = 0 } /* applied, the answer lost */
  :: answered = 0                                     /* never applied */
  :: atomic { strays < STRAYS && stray_op == 0 ->
       strays++; stray_op = op; stray_s = s; stray_r = r; answered = 0 } /* applied later */
  fi
}

/* The oldest key of the lock's create revision (0: none) into out. */
inline oldest(out) {
  out = 0;
  j = 1;
  do
  :: j < 5 ->
     if
     :: kex[j] && (out == 0 || kcr[j] < out) -> out = kcr[j]
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  j = 0
}

/* delete_own_key(session s, revision r): `answered` says whether it is known to be done. */
inline delete_own_key(s, r) {
  if
  :: r == 0 -> answered = 1
  :: r != 0 && r != UNK -> send(CDEL, s, r)
  :: r == UNK ->
#ifdef UNCOMPARED_DELETE
     send(UDEL, s, 0)
#else
     /* Range(own key), then compare-delete with the revision found */
     if
     :: atomic { found = (kex[s] -> kcr[s] : 0); answered = 1 }
     :: answered = 0 /* the read failed */
     fi;
     if
     :: answered && found != 0 -> send(CDEL, s, found)
     :: else -> skip
     fi;
     found = 0
#endif
  fi
}

/* settle(session s): retries the undeleted own key of the slot, one settle per session at a
 * time (SETTLE_GUARD); frees the slot once done. */
inline settle(s) {
  atomic {
    if
    :: und[s] != 0 && !lalive[s] -> und[s] = 0; slot[s] = 0; pend = 0 /* went with the lease */
    :: und[s] != 0 && lalive[s] && (!SETTLE_GUARD || !settling[s]) ->
       settling[s] = 1; pend = und[s]
    :: else -> pend = 0
    fi
  }
  if
  :: pend != 0 ->
     delete_own_key(s, pend);
     atomic {
       if
       :: answered && und[s] != 0 -> und[s] = 0; slot[s] = 0
       :: else -> skip
       fi;
       settling[s] = 0;
       answered = 0
     }
  :: else -> skip
  fi;
  pend = 0
}

/* drop_own_key() then free_slot(): a delete without an answer keeps the slot taken. */
inline drop_and_free(s, r) {
  delete_own_key(s, r);
  atomic {
    if
    :: !answered -> und[s] = r
    :: else -> slot[s] = 0
    fi;
    answered = 0
  }
}

/* A session lease ends (etcd's expiry, or a revoke): its key goes; its grants are over. */
inline end_session(s) {
  lalive[s] = 0;
  kex[s] = 0;
  j = 0;
  do
  :: j < THREADS ->
     if
     :: hold[j] && hs[j] == s -> hold[j] = 0
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  j = 0
}

/* Someone else deletes the key of session s (etcdctl del): its holder, or the acquisition
 * that is about to be granted with it, is usurped. */
inline usurp(s) {
  kex[s] = 0;
  usurped = usurped | (1 << kcr[s]);
  j = 0;
  do
  :: j < THREADS ->
     if
     :: hold[j] && hs[j] == s && htok[j] == kcr[s] -> hold[j] = 0
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  j = 0
}

#define FAULTS(S) \
  :: atomic { deaths < DEATHS && lalive[S] -> deaths++; end_session(S) } \
  :: atomic { admins < ADMIN && kex[S] -> admins++; usurp(S) }

proctype Env() {
  byte j;
end:
  do
  FAULTS(1)
  FAULTS(2)
  FAULTS(3)
  FAULTS(4)
  :: atomic { stray_op != 0 -> apply(stray_op, stray_s, stray_r); stray_op = 0; stray_s = 0; stray_r = 0 }
  od
}

/* sweep_ghosts(session s): read the own key (the guard: one is there, the slot is free);
 * compare-delete the revision found if the slot stayed free and untaken meanwhile. */
inline sweep(s) {
  if
  :: atomic { true -> found = (kex[s] -> kcr[s] : 0) } /* the read, answered */
  :: skip                                              /* the read failed */
  fi;
  if
#ifdef UNGUARDED_SWEEP
  :: found != 0 -> send(CDEL, s, found)
#else
  :: atomic { found != 0 && !slot[s] && takes[s] == seen } -> send(CDEL, s, found)
#endif
  :: else -> skip
  fi;
  found = 0;
  seen = 0;
  answered = 0
}

#ifdef NO_GHOSTS
#define SWEEP(S)
#else
#define SWEEP(S) \
  :: atomic { ghost[S] && kex[S] && !slot[S] -> s = S; seen = takes[S] }; sweep(s); s = 0
#endif

/* renew_all(): settle() before each session's keep-alive, then sweep_ghosts(). */
proctype Renewer() {
  byte j;
  byte pend;
  byte found;
  byte seen;
  bool answered;
  byte s;
end:
  do
  :: atomic { und[1] != 0 -> s = 1 }; settle(s); s = 0
  :: atomic { und[2] != 0 -> s = 2 }; settle(s); s = 0
  :: atomic { und[3] != 0 -> s = 3 }; settle(s); s = 0
  :: atomic { und[4] != 0 -> s = 4 }; settle(s); s = 0
  SWEEP(1)
  SWEEP(2)
  SWEEP(3)
  SWEEP(4)
  od
}

/* NO_ORPHAN, once nothing can move. The variants that break ORDER or MUTEX are checked for
 * that alone (without a slot, every key looks unaccounted for). */
#if defined(NO_SLOT) || defined(CONCURRENT_SETTLE) || defined(UNCOMPARED_DELETE) || \
    defined(NO_RECHECK)
#define ORPHAN_CHECK 0
#else
#define ORPHAN_CHECK 1
#endif
proctype Quiet() {
  timeout ->
  assert(!(kex[1] && !slot[1]) && !(kex[2] && !slot[2]) && !(kex[3] && !slot[3]) &&
         !(kex[4] && !slot[4]))
}

/* Checks the invariants at thread th's grant of token `own` on session s, and records it. */
inline grant(th, s) {
  /* ORDER: above every grant completed before the read that decided this one, and unique */
  assert(own > dec);
  assert((tokens_granted & (1 << own)) == 0);
  tokens_granted = tokens_granted | (1 << own);
  /* MUTEX: no other thread holds a grant that is not over or usurped (a grant whose own key
   * someone else deleted before it was seen is usurped from the start: not checked) */
  if
  :: (usurped & (1 << own)) == 0 ->
     j = 0;
     do
     :: j < THREADS ->
        assert(j == th || !hold[j]);
        j++
     :: else -> break
     od;
     j = 0;
     hold[th] = 1
  :: else -> skip
  fi;
  hs[th] = s;
  htok[th] = own;
  if
  :: own > max_done -> max_done = own
  :: else -> skip
  fi
}

proctype Thread(byte th) {
  byte k = 0;   /* acquisitions made */
  byte c;       /* the thread's client */
  byte s;       /* the session of the acquisition */
  byte own;     /* the own key's create revision: 0 none, UNK unknown */
  byte hrv;     /* the oldest key's create revision as last read */
  byte dec;     /* max_done at the read that decided the grant */
  byte restarts;
  byte creates; /* create Txns of this attempt (a leftover allows one more) */
  byte found;
  byte pend;
  byte j;
  bool answered;

  c = CLIENT(th);
  do
  :: k < NACQ(th) ->
     k++;
     restarts = 0;
again:
     /* session_for(): a gone lease is dropped with its undeleted keys, a fresh one granted */
     atomic {
       if
       :: !lalive[cur[c]] && cur[c] == FIRST_S(c) ->
          if
          :: und[cur[c]] != 0 -> und[cur[c]] = 0; slot[cur[c]] = 0
          :: else -> skip
          fi;
          cur[c] = SPARE_S(c);
          lalive[cur[c]] = 1
       :: else -> skip
       fi;
       s = cur[c]
     }
     if
     :: !lalive[s] -> goto done /* no more sessions in the model: the acquisition fails */
     :: else -> skip
     fi;
#ifndef NO_SLOT
     /* take_slot() */
     if
     :: und[s] != 0 -> settle(s)
     :: else -> skip
     fi;
     if
     :: atomic { !slot[s] -> slot[s] = 1; takes[s] = (takes[s] + 1) % 4 }
     :: slot[s] -> goto done /* kLocked (a try, or a wait that ran out); kUnavailable */
     fi;
#endif
     own = 0;
     creates = 0;
create:
     creates++;
     /* create_own_key(): the Txn */
     if
     :: atomic {
          !lalive[s] -> own = 0 /* lease not found: session_for() will replace it */
        };
        goto restart
     :: atomic {
          lalive[s] && kex[s] -> found = kcr[s] /* a leftover own key */
        };
        if
        :: creates > 1 -> found = 0; own = UNK; goto give_up /* "own key keeps reappearing" */
        :: else -> skip
        fi;
        send(CDEL, s, found);
        found = 0;
        if
        :: answered -> answered = 0; goto create
        :: else -> own = UNK; ghost[s] = 1; goto give_up /* the leftover's delete failed */
        fi
     :: atomic {
          lalive[s] && !kex[s] ->
          rev++; kex[s] = 1; kcr[s] = rev; own = rev;
          oldest(hrv); dec = max_done
        }
     :: atomic {
          strays < STRAYS && stray_op == 0 && lalive[s] && !kex[s] ->
          /* an earlier try went unanswered (applied later), the failover's retry is answered */
          strays++; stray_op = CREATE; stray_s = s;
          rev++; kex[s] = 1; kcr[s] = rev; own = rev;
          oldest(hrv); dec = max_done;
          ghost[s] = ghost[s] || RETRY_GHOST
        }
     :: atomic { true -> apply(CREATE, s, 0); own = UNK; ghost[s] = 1 }; goto give_up /* applied, no answer */
     :: atomic { true -> own = UNK; ghost[s] = 1 }; goto give_up /* not applied */
     :: atomic { strays < STRAYS && stray_op == 0 ->
          strays++; stray_op = CREATE; stray_s = s; own = UNK; ghost[s] = 1 }; goto give_up /* late */
     fi;
     assert(rev < 31);
     /* acquire_on(): the wait loop */
     do
     :: hrv == own -> break
     :: hrv != own -> goto give_up /* a try: kLocked; a wait: cancelled, or out of time */
     :: hrv != own ->
        /* keep_session_alive(): a keep-alive falling due finds a gone lease */
        if
        :: !lalive[s] -> goto restart
        :: true -> skip
        fi;
        /* recheck(): the own key with its revision, then the oldest key */
        if
        :: true -> goto give_up /* the read failed */
        :: atomic {
#ifdef NO_RECHECK
             oldest(hrv);
             if
             :: hrv == 0 || hrv >= own -> hrv = own
             :: else -> skip
             fi;
             dec = max_done;
             found = 1
#else
             if
             :: kex[s] && kcr[s] == own -> oldest(hrv); dec = max_done; found = 1
             :: else -> found = 0
             fi
#endif
           };
           if
           :: found == 0 -> goto restart /* not mine any more: start over */
           :: else -> found = 0
           fi
        fi
     od;
     /* grant(): the validity check; a lease etcd has expired leaves no validity (expiry rule) */
     if
     :: atomic { lalive[s] -> grant(th, s); hrv = 0; dec = 0 }
     :: !lalive[s] -> goto restart /* the forced keep-alive finds the lease gone */
     :: true -> goto give_up       /* "did not confirm the session within the validity" */
     fi;
     /* the holder: releases, or keeps the grant forever (a crash, or never released) */
     if
     :: atomic { hold[th] = 0; hs[th] = 0; htok[th] = 0 }; /* release(): drop_own_key, free_slot */
        drop_and_free(s, own);
        goto done
     :: break
     fi;
restart:
     drop_and_free(s, own);
     restarts++;
     if
     :: restarts <= MAXR -> goto again
     :: else -> goto done
     fi;
give_up:
     drop_and_free(s, own);
done:
     own = 0;
     hrv = 0;
     dec = 0;
     s = 0;
     restarts = 0;
     creates = 0
  :: else -> break
  od
}

init {
  atomic {
    lalive[1] = 1;
    lalive[3] = 1;
    cur[0] = 1;
    cur[1] = 3;
    run Env();
    run Renewer();
    if
    :: ORPHAN_CHECK -> run Quiet()
    :: else -> skip
    fi;
    run Thread(0);
    run Thread(1);
    run Thread(2)
  }
}
