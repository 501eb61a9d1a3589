/*
 * Redlock with round 2: fencing tokens only grow, mutual exclusion under the expiry rule, and
 * an acquire that arrives after its attempt's release takes nothing (tombstones).
 * Checked exhaustively by scripts/model-check.sh; docs/PROTOCOLS.md ("Redis and Redlock",
 * "Model") says what is covered and what is abstracted.
 *
 * What is modelled (each step names the code it abstracts):
 *  - N = 3 instances, each holding the lock key (which attempt's SET wrote it) and the fence
 *    counter. The scripts run atomically on an instance, in any order against each other.
 *  - 2 or 3 clients; client c makes up to A0, A1, A2 attempts (a retry after a failed attempt
 *    or a new acquisition after a release is the next attempt). Each attempt writes its own
 *    lock value. Default: A0 = 2, A1 = 1 (one client retries, the other competes), TICKS = 2,
 *    LOSSES = 1; too many states for 2 GB together: scripts/model-check.sh checks A0 = 2,
 *    A1 = 1 with TICKS = 0, LOSSES = 0 (also with EARLY_EXPIRY), and A0 = 1, A1 = 1 with the
 *    default time and loss.
 *  - Every request (round 1, round 2, release) is its own message per instance, delivered at
 *    any later moment or never: messages are delayed and reordered arbitrarily. A client may
 *    stop waiting for replies at any moment (fan_out's deadlines and the majority grace are
 *    time-based and time is abstracted), and any reply it does not see counts as a timeout
 *    (ambiguous: the request may still execute afterwards, or may already have).
 *  - Time: a clock that ticks (Clock below) up to TICKS times, one clock for all instances
 *    (delta = 0). The counters are clock-seeded: round 1 sets counter = max(counter + 1,
 *    floor) (counter.lua: max(stored + 1, server_ms * 2^20); a tick stands for a millisecond,
 *    and the floor keeps only the order of the real one, see `floor` below). An attempt's
 *    validity ends at a moment of the model's choosing, and at the latest once more than V
 *    ticks have passed since it sent round 1 (the TTL is at most V ticks too), so a grant
 *    completes within V ticks of its start. A key may expire at any moment; its expiry means
 *    that the validity of the attempt that wrote it has ended (the expiry rule, see live/over
 *    below). The client's own check that the validity has not run out by the end of round 2
 *    may fail at any grant.
 *  - Data loss: an instance may lose all its data (lock key, counter and tombstones: a restart
 *    without persistence), up to LOSSES times in all, one instance down at a time. It executes no
 *    script while down and comes back empty once RESTART_DELAY = V + 1 ticks have passed
 *    (longer than the longest TTL plus 2 delta plus a tick: docs/PROTOCOLS.md "Tokens after
 *    data loss"). Requests sent to it meanwhile arrive after it is back, or never.
 *  - Late attempts: a round-1 request of an attempt that has ended (failed, or its grant
 *    released) may still arrive at an instance, before or after that attempt's release there.
 *    The release of every ended attempt goes to every instance where its round 1 was not seen
 *    refused (try_acquire's release_on; release_grant: all), as a message of its own (a fresh
 *    connection: it may overtake the request); the ReleaseFinisher sends an unanswered one
 *    again until the instance answers, but the model also lets it never arrive, which only
 *    leaves the late request unstopped. release.lua leaves a tombstone for the attempt's value
 *    where the lock does not hold that value; acquire.lua does nothing where its attempt's
 *    tombstone exists. A release still owed to an instance that did not answer it also travels
 *    with the Client's next attempt on the same lock (acquire.lua runs it first, in the same
 *    script): the same release delivered once more, which the model leaves out, as it covers
 *    nothing the model does not allow anyway (a release may run at any moment once it is
 *    sent: its deletion is the expiry rule's step, its tombstone the release-first step; a
 *    second delivery finds the tombstone, or no key of the attempt: a late request that found
 *    no tombstone ran before the first delivery, which deleted its key or found it gone; only
 *    after a data loss can it still delete one, which would only shorten the escape below);
 *    the same holds for the finisher's resending of a release that did run. A tombstone's
 *    expiry (max(ttl, 60 s)) is not modelled: the argument assumes the late request arrives
 *    within the tombstone's life. A data loss takes the instance's tombstones with it.
 *  - EARLY_EXPIRY: a lock key lost before its TTL on an instance that stays up and keeps its
 *    counter (its server's clock runs fast or steps forward, a volatile-* eviction, an admin's
 *    DEL of the key), at any moment, up to EARLY times (1: on one instance). The attempt that
 *    wrote it is usurped: its validity has not ended, its client does not know, and another
 *    client may be granted while it holds (the key counts for nobody's majority any more).
 *    MUTEX does not count usurped grants (fencing covers that gap), even where the attempt's
 *    other keys still form a majority (MUTEX is checked less than it could be); TOKEN_GROWS and
 *    LATE_TAKES_NOTHING count every grant and every SET. Tombstones are not lost early (their
 *    life is the assumption stated below).
 *  - Client crashes: a client that takes no further step. Every state of a run with a crash is
 *    reached by the same run with the client frozen, because all other processes (instances,
 *    network, expiry) move independently of it; so no explicit crash transition is needed. The
 *    client may also keep a grant without ever releasing it (it then expires).
 *
 * Abstracted away: the wait queue (acquire.lua's stale-waiter sweep, `head`, ZADD and PEXPIRE:
 * it only refuses more SETs and changes no key the invariants read), holder metadata, renewals
 * (renew.lua: a renewal only extends a key under the same value compare as release.lua), pub/sub
 * wake-ups, reconnects.
 *
 * Invariants (the first two asserted at each grant, in Client below; the third at each SET of
 * the lock key by a round-1 request, in late_acquire and acquire_script):
 *  - TOKEN_GROWS: the token exceeds the token of every grant completed before this attempt
 *    began, and no two grants share a token.
 *  - MUTEX: no other client holds a grant whose validity has not ended, unless one of its keys
 *    was lost early (EARLY_EXPIRY: usurped); not asserted for a grant usurped before it was
 *    complete.
 *  - LATE_TAKES_NOTHING: an acquire that arrives after its attempt's release takes nothing: when
 *    acquire.lua SETs the lock key on an instance, no release of that attempt has executed on
 *    that instance since the instance last lost its data. The restriction is needed and
 *    honest: a late acquire that arrives after its instance lost its data (and the tombstone
 *    with it) and came back takes the key there, held by nobody until its TTL ends
 *    (NO_LOSS_EXEMPTION below shows it).
 *
 * Variants, each a real defect or documented assumption; each must be caught:
 *  - NO_ROUND2: the token is the max of INCR over the majority without round 2's write-back
 *    (the design before round 2; tests/unit/round2_simulation_test.cpp shows it by hand).
 *  - REUSE_VALUE: every attempt of a client writes the same lock value (the owner id): the code
 *    before per-attempt values (commit 74cfaf5). A delayed release of a failed attempt deletes the
 *    client's later grant on a majority, and another client is granted while it holds.
 *  - COUNTER_ONLY: counters are plain INCR (no clock floor), with the same data losses: the
 *    design before clock-seeded counters, which the second review broke (a token not above an
 *    earlier one after a loss).
 *  - EARLY_RESTART: an instance that lost its data comes back at once (RESTART_DELAY 0), while
 *    grants whose keys it held may still be valid.
 *  - NO_TOMBSTONE: release.lua writes no tombstone and acquire.lua checks none (the code before
 *    tombstones): a round-1 request that arrives after its attempt's release takes the lock
 *    key for nobody, for a whole TTL.
 *  - NO_LOSS_EXEMPTION: LATE_TAKES_NOTHING asserted also on an instance that lost its data
 *    after the release (with data loss): the escape that the invariant's restriction admits.
 *
 * Bound: every run is finite (each client makes at most its attempts, every message is
 * delivered at most once, every key is written by one delivery and goes at most once, the clock
 * ticks at most TICKS times, LOSSES losses and EARLY early key losses at most), so the search is
 * exhaustive within the depth limit DEPTH (pan counts the
 * statements inside atomic steps too); scripts/model-check.sh passes -m DEPTH and fails if pan
 * reports that the depth was too small.
 */
#define DEPTH 10000

#define N 3
#define Q 2 /* src/core/quorum.h quorum(n) = n / 2 + 1; has_quorum(c, n) = c >= quorum(n) */
#define ALL 7 /* every instance: calls_to_all() (redis_backend.cpp) */

/* Attempts per client (a retry after a failed attempt, or a new acquisition after a release,
 * is the next attempt). CLIENTS counts the clients with A0, A1, A2 > 0. */
#ifndef A0
#define A0 2
#endif
#ifndef A1
#define A1 1
#endif
#ifndef A2
#define A2 0
#endif
#if A2 > 0
#define CLIENTS 3
#else
#define CLIENTS 2
#endif
#define NATT (A0 + A1 + A2) /* attempt ids 1..NATT; 0 = none */
/* client c's attempts are FIRST(c) .. FIRST(c) + ATTEMPTS(c) - 1 */
#define FIRST(c) ((c) == 0 -> 1 : ((c) == 1 -> A0 + 1 : A0 + A1 + 1))
#define ATTEMPTS(c) ((c) == 0 -> A0 : ((c) == 1 -> A1 : A2))
#define OWNER(a) ((a) <= A0 -> 0 : ((a) <= A0 + A1 -> 1 : 2))

/*
 * Time, in ticks (a tick stands for a millisecond of docs/PROTOCOLS.md "Tokens after data
 * loss"; one clock for all instances: delta = 0).
 *  - V: an attempt's validity ends at the latest when V ticks have passed since it sent round
 *    1 (age[a] > V). The lock keys' TTL is at most V ticks too (a key may expire before).
 *  - The clock floor. counter.lua draws max(counter + 1, server_ms * 2^20). The argument
 *    assumes fewer than 2^20 grants of one key per millisecond, so a counter drawn in one
 *    millisecond is below every floor of a later one, and at least the floor of its own. The
 *    model keeps only that order: `floor` is the floor of the current tick, and a tick raises
 *    it above every counter value that still exists anywhere (the counters, the replies and
 *    tokens in flight, the tokens granted). Every comparison the model makes (max, <, ==) and
 *    every step (+ 1, copies, the floor) gives the same result on these values as on the real
 *    ones (an order isomorphism: a real value t * 2^20 + m drawn in tick t is floor_t + m
 *    here; values that no longer exist anywhere are never compared). Ticks in which nothing
 *    was drawn leave the floor as it was.
 *  - TICKS: the clock ticks at most this many times (runs with more ticks are not covered:
 *    every tick multiplies the states several times over).
 *  - LOSSES: at most this many data losses in all, one instance down at a time.
 *  - RESTART_DELAY: an instance that lost its data stays down this many ticks: V + 1, longer
 *    than the longest TTL plus 2 delta plus a tick (docs/PROTOCOLS.md: D > R + 2 delta +
 *    1 ms, with R at most the validity).
 */
#ifndef V
#define V 1
#endif
#ifndef LOSSES
#define LOSSES 1
#endif
#ifndef TICKS
#define TICKS 2
#endif
/* EARLY: lock keys lost before their TTL, at most (EARLY_EXPIRY: 1). */
#ifndef EARLY
#ifdef EARLY_EXPIRY
#define EARLY 1
#else
#define EARLY 0
#endif
#endif
#ifndef RESTART_DELAY
#ifdef EARLY_RESTART
#define RESTART_DELAY 0
#else
#define RESTART_DELAY (V + 1)
#endif
#endif

byte floor = 1;           /* the clock floor of the current tick */
byte age[NATT + 2];       /* ticks since attempt a sent round 1, while its validity lasts */
byte down[N];             /* 1 while instance i is down after losing its data */
byte down_age = 0;        /* ticks since the instance that is down lost its data (capped) */
byte losses = 0;
byte ticks = 0;           /* ticks so far (at most TICKS) */

/*
 * The lock value written by attempt a. redis_backend.cpp RedlockBackend::attempt_value: the
 * owner id followed by 64 fresh random bits, so every attempt's value is distinct.
 * REUSE_VALUE: the owner id alone, the same for all attempts of one client.
 */
#ifdef REUSE_VALUE
#define VAL(a) (OWNER(a) + 1)
#else
#define VAL(a) (a)
#endif
#define BIT(i) (1 << (i))
#define HAS(m, i) (((m) >> (i)) & 1)
#define COUNT(m) (HAS(m, 0) + HAS(m, 1) + HAS(m, 2))

/* Per instance: the lock key fencelock:{K} (the attempt whose SET wrote it, 0 when absent) and
 * the fence counter fencelock:{K}:fence (absent = 0). */
byte lock[N];
byte fence[N];

/* Requests in flight: one bit per instance, per attempt. */
byte acq_pend[NATT + 1];   /* acquire.lua (round 1) */
byte raise_pend[NATT + 1]; /* raise_fence.lua (round 2) */
byte raise_tok[NATT + 1];  /* its ARGV[2], the chosen token */
byte rel_pend[NATT + 1];   /* release.lua */

/* Replies that arrived while the attempt still waits for them (later ones are dropped with the
 * call, as fan_out gives up a connection that missed its deadline). */
bool wait1[NATT + 1];
bool wait2[NATT + 1];
byte r1_granted[NATT + 1]; /* acquire.lua answered {1, counter} */
byte r1_counter[(NATT + 1) * N];
byte r2_ok[NATT + 1];      /* raise_fence.lua answered 1 */

/* Time abstracted. live[a]: attempt a is in progress, or its grant is held. over[a]: its
 * validity (valid_until = send time + ttl - drift, src/core/quorum.cpp validity_deadline) has
 * ended. The expiry rule: a key outlives the validity of the attempt that wrote it, because its
 * PX ttl starts after the send time and the drift allowance covers the clock rates. So a key may
 * expire at any moment, and its expiry marks that attempt's validity as ended; the holder (if
 * any) no longer counts as holding then. The client's own check `Clock::now() < validity` may
 * also find it ended. (A validity that ends with no key expiring changes nothing the invariants
 * read except MUTEX, which it would only weaken.) Reset when the attempt ends, so that finished
 * attempts do not multiply the states. */
bool live[NATT + 2];
bool over[NATT + 2];
#if EARLY > 0
/* usurped[a]: a key of attempt a was lost before its TTL while a's validity lasted (reset when
 * the attempt ends). */
bool usurped[NATT + 2];
byte early = 0; /* early key losses so far */
#endif

/* Observer state for the invariants. */
byte holding[CLIENTS];  /* the attempt whose grant the client holds, 0 none */
byte max_done = 0;      /* the largest token of the grants completed so far */
byte gtok[NATT + 1];    /* the token of attempt a's grant, 0 none */
byte ctok[CLIENTS];     /* client c's token, from the end of round 1 to the grant's verdict */
byte cbegan[CLIENTS];   /* max_done when client c's attempt began, until the verdict */
/* LATE_TAKES_NOTHING, within one acquire step: the attempt whose SET this is was released on
 * this instance already (hidden: not part of the state) */
hidden byte released_here;

/*
 * State-space reductions. Each only merges states that no later step can tell apart, or drops a
 * request whose delivery is the same as a step the model allows anyway; none removes a
 * behaviour. None applies under REUSE_VALUE, where other attempts share a value.
 *  - A release of an attempt that has ended deletes only that attempt's key, which the expiry
 *    rule lets expire at any moment anyway (its attempt is not live): the same step. Its
 *    tombstone matters only where the attempt's round-1 request is still in flight (elsewhere
 *    that request has run, and no other attempt has its value). So with distinct values
 *    releases are sent only paired with those requests (dead_acq below), not as rel_pend
 *    (REL_MASK).
 *  - A round-2 request of attempt A at instance I changes something only while A's key is
 *    there (it went only to instances that granted A): dropped when the key goes (gc).
 *  - Once an attempt has ended and has no round-2 request left at an instance, nothing can
 *    tell its key there from any other ended attempt's: it becomes DEAD; its round-1
 *    requests still in flight become anonymous ones, which write DEAD. Each goes with its
 *    attempt's release to that instance, and the pair only acts on itself (the tombstone is
 *    the attempt's own), so per instance it is enough to count the pairs in each phase:
 *    dead_acq[i]: both in flight; released_acq[i]: the release ran first (its tombstone is
 *    there, or, under NO_TOMBSTONE, none), the round-1 request still in flight; lost_acq[i]:
 *    the same, but the instance lost its data since (the tombstone with it). A pair whose
 *    round-1 request ran first is done: its release then deletes that key or finds it gone
 *    (the expiry rule's step, see above) and its tombstone stops nothing.
 *  - A tombstoned request that no data loss can reach any more (LOSSES used up) does nothing
 *    whenever it arrives: it is dropped when its release runs (TOMB_INERT).
 *  - Counter values are renumbered in order after every step (renumber_values below).
 */
#define DEAD (NATT + 1)
#ifdef NO_TOMBSTONE
#define TOMBSTONES 0
#else
#define TOMBSTONES 1
#endif
/* LATE_TAKES_NOTHING is asserted also where the instance lost its data since the release. */
#ifdef NO_LOSS_EXEMPTION
#define AFTER_LOSS_COUNTS 1
#else
#define AFTER_LOSS_COUNTS 0
#endif
#ifdef REUSE_VALUE
#define REL_MASK(A) ALL
/* tomb[v]: instances holding the tombstone of lock value v (release.lua); released[a]:
 * instances where a release of attempt a ran since they last lost their data (observer). */
byte tomb[NATT + 1];
byte released[NATT + 1];
#define TOMBED(A, I) HAS(tomb[VAL(A)], I)
#define RELEASED(A, I) HAS(released[A], I)
#define HOLDS_DATA(I) 1 /* (tombstones too: no reduction here) */
#else
#define REL_MASK(A) 0
byte dead_acq[N];     /* round-1 requests of ended attempts, and their releases, in flight */
byte released_acq[N]; /* ... whose release ran here first (since the last data loss here) */
byte lost_acq[N];     /* ... whose release ran here before this instance lost its data */
#define TOMB_INERT (TOMBSTONES && losses >= LOSSES)
#define TOMBED(A, I) 0
#define RELEASED(A, I) 0
/* Instance I holds something a data loss takes: its key, its counter or a tombstone. */
#define HOLDS_DATA(I) (lock[I] != 0 || fence[I] != 0 || (TOMBSTONES && released_acq[I] > 0))
#endif

inline gc(i) {
#ifndef REUSE_VALUE
  j = 1;
  do
  :: j <= NATT ->
     if
     :: HAS(raise_pend[j], i) && lock[i] != j -> raise_pend[j] = raise_pend[j] & ~BIT(i)
     :: else -> skip
     fi;
     if
     :: raise_pend[j] == 0 && !wait2[j] -> raise_tok[j] = 0
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  if
  :: lock[i] != 0 && lock[i] != DEAD && !live[lock[i]] && !HAS(raise_pend[lock[i]], i) ->
     lock[i] = DEAD
  :: else -> skip
  fi;
  j = 0
#else
  skip
#endif
}

/* Attempt a has ended (failed, or its grant was released). */
inline retire(a) {
  live[a] = 0;
  over[a] = 0;
#if EARLY > 0
  usurped[a] = 0;
#endif
  age[a] = 0;
  rel_pend[a] = REL_MASK(a);
#ifndef REUSE_VALUE
  i = 0;
  do
  :: i < N ->
     if
     :: HAS(acq_pend[a], i) -> dead_acq[i]++
     :: else -> skip
     fi;
     if
     :: lock[i] == a && !HAS(raise_pend[a], i) -> lock[i] = DEAD
     :: else -> skip
     fi;
     i++
  :: else -> break
  od;
  acq_pend[a] = 0;
  if
  :: raise_pend[a] == 0 -> raise_tok[a] = 0
  :: else -> skip
  fi;
  i = 0
#endif
}

/*
 * Symmetry reduction: the instances are interchangeable (every request goes to every instance,
 * the clients treat the replies alike, and the Instance processes differ only in their index),
 * so after every step the instances are sorted by their whole state; a state and its instance
 * permutations count once. Off with NO_SYMMETRY, which also turns off the renumbering of
 * counter values (both are C code, which spin -t cannot replay).
 */
#ifndef NO_SYMMETRY
c_code {
/* The whole state of instance x as one number: its key and counter, the anonymous round-1
 * requests in flight (by phase), and per attempt the requests in flight, the replies that came,
 * the counter replied and (REUSE_VALUE) the tombstones and releases. Two different states with
 * the same number would only be left unsorted (less reduction, never a wrong merge). */
static unsigned long long instance_signature(int x) {
  unsigned long long s = now.lock[x];
  s = s * 64 + now.fence[x];
  s = s * 2 + now.down[x];
#ifndef REUSE_VALUE
  s = s * 8 + now.dead_acq[x];
  s = s * 8 + now.released_acq[x];
  s = s * 8 + now.lost_acq[x];
#endif
  for (int a = 1; a <= NATT; a++) {
    s = s * 2 + ((now.acq_pend[a] >> x) & 1);
    s = s * 2 + ((now.raise_pend[a] >> x) & 1);
    s = s * 2 + ((now.rel_pend[a] >> x) & 1);
    s = s * 2 + ((now.r1_granted[a] >> x) & 1);
    s = s * 2 + ((now.r2_ok[a] >> x) & 1);
#ifdef REUSE_VALUE
    s = s * 2 + ((now.tomb[a] >> x) & 1);
    s = s * 2 + ((now.released[a] >> x) & 1);
#endif
    s = s * 64 + now.r1_counter[a * N + x];
  }
  return s;
}
static void swap_bits(unsigned char *m, int x, int y) {
  if ((((*m) >> x) & 1) != (((*m) >> y) & 1)) *m ^= (unsigned char)((1 << x) | (1 << y));
}
static void swap_instances(int x, int y) {
  unsigned char t;
  t = now.lock[x]; now.lock[x] = now.lock[y]; now.lock[y] = t;
  t = now.fence[x]; now.fence[x] = now.fence[y]; now.fence[y] = t;
  t = now.down[x]; now.down[x] = now.down[y]; now.down[y] = t;
#ifndef REUSE_VALUE
  t = now.dead_acq[x]; now.dead_acq[x] = now.dead_acq[y]; now.dead_acq[y] = t;
  t = now.released_acq[x]; now.released_acq[x] = now.released_acq[y]; now.released_acq[y] = t;
  t = now.lost_acq[x]; now.lost_acq[x] = now.lost_acq[y]; now.lost_acq[y] = t;
#endif
  for (int a = 1; a <= NATT; a++) {
    swap_bits(&now.acq_pend[a], x, y);
    swap_bits(&now.raise_pend[a], x, y);
    swap_bits(&now.rel_pend[a], x, y);
    swap_bits(&now.r1_granted[a], x, y);
    swap_bits(&now.r2_ok[a], x, y);
#ifdef REUSE_VALUE
    swap_bits(&now.tomb[a], x, y);
    swap_bits(&now.released[a], x, y);
#endif
    t = now.r1_counter[a * N + x];
    now.r1_counter[a * N + x] = now.r1_counter[a * N + y];
    now.r1_counter[a * N + y] = t;
  }
}
static void order_instances(int x, int y) {
  if (instance_signature(x) > instance_signature(y)) swap_instances(x, y);
}

/* Counter values are only compared (max, <, ==), incremented by one and copied, and the floor
 * only rises above them: renumbering them all in order, with every gap of more than one
 * shrunk to two (so that x + 1 compares with y as before) and 0 (absent) kept, changes no
 * later step. States that differ only in the numbers count once. value_slots: every byte that
 * holds a counter value. */
static int value_slots(unsigned char **v) {
  int n = 0;
  for (int i = 0; i < N; i++) v[n++] = &now.fence[i];
  for (int a = 0; a <= NATT; a++) {
    v[n++] = &now.raise_tok[a];
    v[n++] = &now.gtok[a];
    for (int i = 0; i < N; i++) v[n++] = &now.r1_counter[a * N + i];
  }
  for (int c = 0; c < CLIENTS; c++) {
    v[n++] = &now.ctok[c];
    v[n++] = &now.cbegan[c];
  }
  v[n++] = &now.max_done;
  v[n++] = &now.floor;
  return n;
}
static void renumber_values(void) {
  unsigned char *v[64];
  unsigned char map[256];
  int present[256] = {0};
  int n = value_slots(v);
  for (int k = 0; k < n; k++) present[*v[k]] = 1;
  int prev = 0, next = 0;
  map[0] = 0;
  for (int x = 1; x < 256; x++) {
    if (!present[x]) continue;
    next += (x - prev >= 2) ? 2 : 1;
    map[x] = (unsigned char)next;
    prev = x;
  }
  for (int k = 0; k < n; k++) *v[k] = map[*v[k]];
}
}
#endif

/* Called at the end of every atomic step that changes an instance's state. */
inline canonical() {
#ifndef NO_SYMMETRY
  c_code {
    renumber_values();
    order_instances(0, 1); order_instances(1, 2); order_instances(0, 1);
  }
#else
  skip
#endif
}

/* counter.lua fencelock_counter_advance on instance i: counter = max(counter + 1, floor) (a
 * counter that lost its data is 0: absent). COUNTER_ONLY: plain INCR. */
inline advance_counter(i) {
#ifdef COUNTER_ONLY
  fence[i]++
#else
  if
  :: fence[i] + 1 > floor -> fence[i]++
  :: else -> fence[i] = floor
  fi
#endif
}

/* acquire.lua on instance i for attempt a (the queue abstracted: head == nil):
 * if EXISTS tombstone (KEYS[7]) then return {0, 1}; SET lock value NX PX ttl; on
 * success advance the counter and return {1, counter}, else {0, PTTL}. With distinct values an
 * attempt here has not been released (its requests become anonymous when it is: late_acquire),
 * so only REUSE_VALUE can find a tombstone or a release of its value here. */
inline acquire_script(a, i) {
  acq_pend[a] = acq_pend[a] & ~BIT(i);
  if
  :: TOMBED(a, i) -> skip
  :: !TOMBED(a, i) && lock[i] == 0 ->
     released_here = RELEASED(a, i);
     assert(!released_here); /* LATE_TAKES_NOTHING */
     lock[i] = a;
     advance_counter(i);
     if
     :: wait1[a] -> r1_granted[a] = r1_granted[a] | BIT(i); r1_counter[a * N + i] = fence[i]
     :: else -> skip
     fi
  :: else -> skip /* {0, pttl}: the client treats it as no grant */
  fi
}

/*
 * acquire.lua on instance i for a round-1 request of an ended attempt (anonymous: its key is
 * DEAD). T: its attempt's tombstone is there. R: its attempt's release ran on i (since i last
 * lost its data, unless NO_LOSS_EXEMPTION).
 */
inline late_acquire(i, T, R) {
  if
  :: T -> skip /* acquire.lua: EXISTS of its tombstone (KEYS[7]): {0, 1}, nothing written */
  :: else ->
     if
     :: lock[i] == 0 ->
        /* LATE_TAKES_NOTHING: an acquire that arrives after its attempt's release takes
         * nothing */
        released_here = R;
        assert(!released_here);
        lock[i] = DEAD;
        advance_counter(i)
     :: else -> skip
     fi
  fi
}

/* raise_fence.lua:9-16: if GET lock == value then fence = max(fence, token); return 1, else 0. */
inline raise_script(a, i) {
  raise_pend[a] = raise_pend[a] & ~BIT(i);
  if
  :: lock[i] != 0 && VAL(lock[i]) == VAL(a) ->
     if
     :: fence[i] < raise_tok[a] -> fence[i] = raise_tok[a]
     :: else -> skip
     fi;
     if
     :: wait2[a] -> r2_ok[a] = r2_ok[a] | BIT(i)
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* release.lua: if ARGV[3] ~= '' and GET lock == value then DEL lock holder; else, with a
 * tombstone life (ARGV[4] ~= '0', always for an attempt's value), SET the value's tombstone.
 * Only REUSE_VALUE sends releases as rel_pend (REL_MASK); with distinct values they travel
 * paired with the round-1 requests they stop (dead_acq, in Instance below). */
inline release_script(a, i) {
  rel_pend[a] = rel_pend[a] & ~BIT(i);
  if
  :: lock[i] != 0 && VAL(lock[i]) == VAL(a) -> lock[i] = 0
  :: else ->
#if defined(REUSE_VALUE) && !defined(NO_TOMBSTONE)
     tomb[VAL(a)] = tomb[VAL(a)] | BIT(i)
#else
     skip
#endif
  fi;
#ifdef REUSE_VALUE
  released[a] = released[a] | BIT(i)
#else
  skip
#endif
}

/* Any pending request of attempt A executes on this instance, in any order, while it is up. */
#define DELIVER(A) \
  :: atomic { !down[i] && HAS(acq_pend[A], i) -> acquire_script(A, i); gc(i); canonical() } \
  :: atomic { !down[i] && HAS(raise_pend[A], i) -> raise_script(A, i); gc(i); canonical() } \
  :: atomic { !down[i] && HAS(rel_pend[A], i) -> release_script(A, i); gc(i); canonical() }

proctype Instance(byte i) {
  byte j;
end:
  do
  DELIVER(1)
#if NATT >= 2
  DELIVER(2)
#endif
#if NATT >= 3
  DELIVER(3)
#endif
#if NATT >= 4
  DELIVER(4)
#endif
#if NATT >= 5
  DELIVER(5)
#endif
#if NATT >= 6
  DELIVER(6)
#endif
#ifndef REUSE_VALUE
  /* A round-1 request of an ended attempt executes before its release reaches this instance
   * (the release then finds its key, or finds it gone: the expiry rule's step). */
  :: atomic {
       !down[i] && dead_acq[i] > 0 ->
       dead_acq[i]--;
       late_acquire(i, 0, 0);
       canonical()
     }
  /* Its release executes here first (it went on a fresh connection and overtook it, or the
   * round-1 request is still held up): release.lua finds the lock without the attempt's value
   * and leaves its tombstone (NO_TOMBSTONE: nothing). */
  :: atomic {
       !down[i] && dead_acq[i] > 0 ->
       dead_acq[i]--;
       if
       :: TOMB_INERT -> skip
       :: else -> released_acq[i]++
       fi;
       canonical()
     }
  /* The round-1 request arrives after its release: the tombstone is there (since no data loss
   * here came between them). */
  :: atomic {
       !down[i] && released_acq[i] > 0 ->
       released_acq[i]--;
       late_acquire(i, TOMBSTONES, 1);
       canonical()
     }
  /* The round-1 request arrives after its release, with a data loss here between them: the
   * tombstone went with the data. */
  :: atomic {
       !down[i] && lost_acq[i] > 0 ->
       lost_acq[i]--;
       late_acquire(i, 0, AFTER_LOSS_COUNTS);
       canonical()
     }
#endif
  /* The key's PX ttl runs out (the expiry rule: the validity of its attempt ended). */
  :: atomic {
       lock[i] != 0 ->
       if
       :: lock[i] != DEAD && live[lock[i]] -> over[lock[i]] = 1
       :: else -> skip
       fi;
       lock[i] = 0;
       gc(i);
       canonical()
     }
#if EARLY > 0
  /* The key of an attempt whose validity lasts is lost before its TTL (a fast or stepped
   * clock, an eviction, an admin's DEL); the counter stays. (A key of an ended attempt, or of
   * one whose validity has ended, may expire at any moment anyway: the step above.) */
  :: atomic {
       early < EARLY && lock[i] != 0 && lock[i] != DEAD && live[lock[i]] && !over[lock[i]] ->
       early++;
       usurped[lock[i]] = 1;
       lock[i] = 0;
       gc(i);
       canonical()
     }
#endif
#if LOSSES > 0
  /* The instance loses all its data (a restart without persistence): the lock key and the
   * counter are gone, and it goes down. (The holder metadata and the queue are abstracted.)
   * The validity of the attempts whose keys were here is not ended by this step: it ends at
   * the latest V ticks after their start, which is before the instance is back (their keys
   * were written after their start, and it is back RESTART_DELAY > V ticks after the loss).
   * That the keys are gone before their TTL ran out is, for everyone else, the same as the
   * instance being down. The tombstones are gone too: the round-1 requests they stopped
   * take the key if they arrive now. Losing an empty instance (no key, counter or tombstone)
   * changes nothing (being down is then a delay of its requests), so it is left out. Once
   * no loss is left, every tombstone elsewhere stops its request for good (TOMB_INERT). */
  :: atomic {
       losses < LOSSES && !down[0] && !down[1] && !down[2] && HOLDS_DATA(i) ->
       losses++;
       down[i] = 1;
       down_age = 0;
       lock[i] = 0;
       fence[i] = 0;
#ifdef REUSE_VALUE
       j = 1;
       do
       :: j <= NATT ->
          tomb[j] = tomb[j] & ~BIT(i);
          released[j] = released[j] & ~BIT(i);
          j++
       :: else -> break
       od;
       j = 0;
#else
       lost_acq[i] = lost_acq[i] + released_acq[i];
       released_acq[i] = 0;
       if
       :: TOMB_INERT ->
          released_acq[0] = 0;
          released_acq[1] = 0;
          released_acq[2] = 0
       :: else -> skip
       fi;
#endif
       gc(i);
       canonical()
     }
  /* Back, empty, once RESTART_DELAY ticks have passed. */
  :: atomic {
       down[i] && down_age >= RESTART_DELAY ->
       down[i] = 0;
       down_age = 0;
       canonical()
     }
#endif
  od
}

/* The clock ticks. The floor rises above every counter value that exists (see floor above).
 * An attempt whose validity began more than V ticks ago has ended its validity
 * (validity_deadline: start + ttl - drift, quorum.cpp): its grant no longer counts as held,
 * and an attempt still in progress fails its `Clock::now() < validity` check. The instance
 * that is down counts the ticks to its return. */
#define ABOVE(x) if :: (x) >= floor -> floor = (x) + 1 :: else -> skip fi
proctype Clock() {
  byte a;
end:
  do
  :: atomic {
       ticks < TICKS ->
       ticks++;
       a = 0;
       do
       :: a < N -> ABOVE(fence[a]); a++
       :: else -> break
       od;
       a = 1;
       do
       :: a <= NATT ->
          ABOVE(raise_tok[a]);
          ABOVE(r1_counter[a * N]);
          ABOVE(r1_counter[a * N + 1]);
          ABOVE(r1_counter[a * N + 2]);
          if
          :: live[a] && !over[a] && age[a] < V -> age[a]++
          :: live[a] && !over[a] && age[a] >= V -> over[a] = 1; age[a] = 0
          :: else -> skip
          fi;
          a++
       :: else -> break
       od;
       a = 0;
       do
       :: a < CLIENTS -> ABOVE(ctok[a]); a++
       :: else -> break
       od;
       ABOVE(max_done); /* also above every granted token, and every attempt's `began` */
       if
       :: (down[0] || down[1] || down[2]) && down_age < RESTART_DELAY -> down_age++
       :: else -> skip
       fi;
       a = 0;
       canonical()
     }
  od
}

/* Take the reply of instance I (bit I of mask M) if it arrived, or not: a reply that comes
 * after the client stopped waiting is a timeout, though the request executed. */
#define SEE(M, I, SEEN) \
  if \
  :: HAS(M, I) -> SEEN = SEEN | BIT(I) \
  :: true -> skip \
  fi

proctype Client(byte c) {
  byte k = 0;    /* attempts made */
  byte a;        /* this attempt */
  byte granted;  /* instances whose grant the client saw in round 1 */
  byte at_token; /* granted instances whose counter is the token */
  byte ok;       /* instances that confirmed the token */
  byte i;

end:
  do
  :: k < ATTEMPTS(c) ->
     a = FIRST(c) + k;
     k++;
     /* redis_backend.cpp RedlockBackend::try_acquire: `value = attempt_value(req.owner)`, then
      * acquire.lua to every instance (calls_to_all, fan_out) before any reply is read; the
      * validity runs from `sent`. */
     atomic {
       live[a] = 1;
       age[a] = 0;
       cbegan[c] = max_done;
       wait1[a] = 1;
       acq_pend[a] = ALL;
       canonical()
     }
     /* fan_out returns (all answered, io_deadline, or the majority's grace: a moment of the
      * model's choosing); tally_round1 keeps the grants that came, with their counters (the
      * rest are refusals or errors). quorum.cpp select_token: token = the max counter. */
     atomic {
       wait1[a] = 0;
       SEE(r1_granted[a], 0, granted);
       SEE(r1_granted[a], 1, granted);
       SEE(r1_granted[a], 2, granted);
       i = 0;
       do
       :: i < N ->
          if
          :: HAS(granted, i) && r1_counter[a * N + i] > ctok[c] -> ctok[c] = r1_counter[a * N + i]
          :: else -> skip
          fi;
          i++
       :: else -> break
       od;
#ifdef NO_ROUND2
       /* The design without round 2: a majority of grants is the grant, token = max INCR. */
       if
       :: COUNT(granted) >= Q -> ok = COUNT(granted)
       :: else -> skip
       fi;
#else
       /* `if (has_quorum(r1.granted.size(), n()))`: round2(). An instance whose counter equals
        * the token is confirmed by round 1 (`r1.counters[i] == token.value()`: confirmed++);
        * raise_fence.lua goes to the other granting instances, and only while those at the
        * token are short of a majority (`needed = quorum(n()) - confirmed; if (needed <= 0)
        * calls.clear()`). */
       if
       :: COUNT(granted) >= Q ->
          i = 0;
          do
          :: i < N ->
             if
             :: HAS(granted, i) && r1_counter[a * N + i] == ctok[c] -> at_token = at_token | BIT(i)
             :: else -> skip
             fi;
             i++
          :: else -> break
          od;
          ok = COUNT(at_token);
          if
          :: ok < Q ->
             raise_tok[a] = ctok[c];
             wait2[a] = 1;
             raise_pend[a] = granted & ~at_token
          :: else -> skip
          fi
       :: else -> skip
       fi;
#endif
       r1_granted[a] = 0;
       r1_counter[a * N] = 0;
       r1_counter[a * N + 1] = 0;
       r1_counter[a * N + 2] = 0;
       granted = 0;
       at_token = 0;
       i = 0;
       canonical()
     }
     /* Round 2's fan_out returns at a moment of the model's choosing (confirmed +=
      * raise_fence_confirmed replies); then try_acquire grants when `confirmed.ok() &&
      * Clock::now() < validity`: the validity may have run out by now. */
     atomic {
#ifndef NO_ROUND2
       if
       :: wait2[a] ->
          wait2[a] = 0;
          SEE(r2_ok[a], 0, at_token);
          SEE(r2_ok[a], 1, at_token);
          SEE(r2_ok[a], 2, at_token);
          ok = ok + COUNT(at_token);
          r2_ok[a] = 0;
          at_token = 0
       :: else -> skip
       fi;
#endif
       if
       :: ok >= Q && !over[a] -> skip
       :: ok >= Q -> over[a] = 1; ok = 0 /* DeadlineExceeded: "acquiring took longer ..." */
       :: else -> skip
       fi;
       /* (over[a] is set once the clock passed start[a] + V, so a grant completes within
        * V ticks of its start.) */
       if
       :: ok >= Q ->
          /* TOKEN_GROWS: above every grant completed before this attempt began, and unique */
          assert(ctok[c] > cbegan[c]);
          i = 1;
          do
          :: i <= NATT -> assert(gtok[i] != ctok[c]); i++
          :: else -> break
          od;
          gtok[a] = ctok[c];
          /* MUTEX: no other client holds a grant whose validity has not ended (EARLY_EXPIRY:
           * but one whose key was lost early; not asserted for a grant usurped so) */
#if EARLY > 0
          if
          :: !usurped[a] ->
             i = 0;
             do
             :: i < CLIENTS ->
                assert(i == c || holding[i] == 0 || over[holding[i]] || usurped[holding[i]]);
                i++
             :: else -> break
             od
          :: else -> skip
          fi;
#else
          i = 0;
          do
          :: i < CLIENTS ->
             assert(i == c || holding[i] == 0 || over[holding[i]]);
             i++
          :: else -> break
          od;
#endif
          i = 0;
          holding[c] = a;
          if
          :: ctok[c] > max_done -> max_done = ctok[c]
          :: else -> skip
          fi
       :: else ->
          /* try_acquire's failure path: release_keys(value) on every instance. (The code skips
           * it when every instance answered "held"; then it would change nothing.) */
          retire(a)
       fi;
       cbegan[c] = 0;
       ctok[c] = 0;
       ok = 0;
       canonical()
     }
     if
     :: holding[c] == a ->
        if
        :: atomic {
             /* Lease::release -> release_grant -> release_keys(value): release.lua on every
              * instance */
             holding[c] = 0;
             retire(a);
             canonical()
           }
        :: break /* keeps the grant and never releases it (or crashes): its keys expire */
        fi
     :: else -> skip
     fi
  :: else -> break
  od
}

init {
  byte c;
  atomic {
    run Instance(0);
    run Instance(1);
    run Instance(2);
    run Clock();
    c = 0;
    do
    :: c < CLIENTS -> run Client(c); c++
    :: else -> break
    od
  }
}
