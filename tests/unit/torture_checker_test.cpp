// The torture checker (tools/fencelock/torture/checker.h) on hand-made histories: for every
// property it reports there is a history that violates it and must be reported UNSAFE, and for
// every way a run can prove nothing there is one that must be INCONCLUSIVE (the evidence that a
// fault took effect: torture_fault_evidence_test.cpp). Histories are built as the register and
// the workers record them (torture_history.h).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "torture/checker.h"
#include "torture_history.h"

namespace fencelock::torture {
namespace {

using namespace std::chrono_literals;

TEST(TortureChecker, AHolderPausedPastItsValidityIsOverlappedAndRefusedAndTheRunIsSafe) {
  History h;
  h.cycles(3, 1, 1, 0);
  // Worker 0 (token 4) reads 3 and is paused past its validity (valid until 1 s); worker 1 is
  // granted token 5 at 2 s, reads 3, writes 4; worker 0 wakes and its write is refused.
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  h.acquire(1, 500 * kMs).grant(1, 5, 2 * kS).enter(1, 5, 2001 * kMs);
  h.write(1, 5, 4, 2002 * kMs).exit(1, 5, 2003 * kMs).lease(1, 5, 4 * kS, 2004 * kMs);
  h.write(0, 4, 4, 3100 * kMs, /*accepted=*/false).exit(0, 4, 3101 * kMs);
  h.lease(0, 4, 1 * kS, 3102 * kMs, /*lost=*/true, /*fired_at=*/3 * kS);
  h.r.pauses = {{0, 150 * kMs, 3 * kS}};
  h.fault(fault("pause", 150 * kMs, 3 * kS, true, 0, h.pid_of(0)));
  CheckOptions o = options();
  o.requested_faults = {"pause"};
  Report report = check(h.r, o);
  EXPECT_EQ(report.verdict(), Verdict::kSafe)
      << testing::PrintToString(report.violations) << testing::PrintToString(report.inconclusive);
  EXPECT_EQ(report.grants, 5u);
  EXPECT_EQ(report.writes_applied, 4u);
  EXPECT_EQ(report.writes_rejected, 1u);
  EXPECT_EQ(report.overlaps, 1u);
  EXPECT_EQ(report.overlaps_after_expiry, 1u);
  EXPECT_EQ(report.exclusion_violations, 0u);
  EXPECT_EQ(report.late_lost, 0u) << "the lateness lies inside the pause";
  EXPECT_EQ(report.by_fault["pause"].effective, 1u);
}

// Blind spot 1: a loop deleting the lock key let a second holder in while the first one's lease
// was valid by its own account; the old checker counted the overlap and said SAFE.
TEST(TortureChecker, AnOverlapWhileTheOlderLeaseIsStillValidIsUnsafe) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  h.acquire(1, 150 * kMs).grant(1, 5, 200 * kMs).enter(1, 5, 201 * kMs);
  h.write(1, 5, 4, 202 * kMs).exit(1, 5, 203 * kMs).lease(1, 5, 2 * kS, 204 * kMs);
  h.write(0, 4, 4, 700 * kMs, false).exit(0, 4, 701 * kMs);
  h.lease(0, 4, /*valid_until=*/2100 * kMs, 702 * kMs, /*lost=*/true, 690 * kMs);
  Report report = check(h.r, options());
  EXPECT_EQ(report.overlaps, 1u);
  EXPECT_EQ(report.exclusion_violations, 1u);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);
  ASSERT_FALSE(report.violations.empty());
  EXPECT_NE(report.violations[0].find("mutual exclusion"), std::string::npos);

  // A fault does not excuse it on a backend that promises validity...
  h.fault(fault("drop", 150 * kMs, 450 * kMs));
  EXPECT_EQ(check(h.r, options()).exclusion_violations, 1u);
  // ... it does on one that promises none (PostgreSQL advisory), but only near the fault.
  CheckOptions advisory = options();
  advisory.validity_bound = false;
  Report excused = check(h.r, advisory);
  EXPECT_EQ(excused.exclusion_violations, 0u);
  EXPECT_EQ(excused.overlaps_excused, 1u);
  h.r.faults[0].at = 10 * kS, h.r.faults[0].healed_at = 11 * kS;
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 1u) << "no fault was near";
  // A fault that ends no session (a pause, latency, a clock fault) excuses nothing there.
  h.r.faults[0] = fault("latency", 150 * kMs, 450 * kMs);
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 1u);
  h.r.faults[0] = fault("pause", 150 * kMs, 450 * kMs, true, 2, h.pid_of(2));
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 1u);
  // Nor a session fault when the older holder was never told its lease was lost.
  h.r.faults[0] = fault("drop", 150 * kMs, 450 * kMs);
  h.r.leases.back().lost = false;
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 1u);
}

// Worker 0 (token 4) is inside when it is killed; worker 1 is granted token 5 right after and
// enters before the register has seen worker 0's connection close. On Redis, Redlock, lease mode
// and etcd a killed holder's lock lives until it expires: the kill cannot explain the second
// grant. The old checker excused any overlap with a holder that left no report during any
// session fault (this kill, a kill of another worker, a 10 ms drop).
TEST(TortureChecker, AKillOrADropExcusesNoOverlapWhereALockLivesUntilItExpires) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  h.acquire(1, 150 * kMs);
  h.fault(fault("kill", 300 * kMs, 300 * kMs, true, 0, h.pid_of(0)));
  h.grant(1, 5, 301 * kMs).enter(1, 5, 302 * kMs).leave(0, 303 * kMs);
  h.write(1, 5, 4, 304 * kMs).exit(1, 5, 305 * kMs).lease(1, 5, 2300 * kMs, 306 * kMs);
  h.hello(0, 310 * kMs, /*pid=*/999);  // worker 0's replacement
  Report report = check(h.r, options());
  EXPECT_EQ(report.overlaps, 1u);
  EXPECT_EQ(report.exclusion_violations, 1u);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);
  ASSERT_FALSE(report.violations.empty());
  EXPECT_NE(report.violations[0].find("left no lease report"), std::string::npos)
      << report.violations[0];

  // Nor a 10 ms drop, when the newer holder is the one without a report (killed later) and the
  // older one's report says its lease was valid.
  History drop;
  drop.cycles(3, 1, 1, 0);
  drop.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  drop.fault(fault("drop", 140 * kMs, 150 * kMs));
  drop.acquire(1, 150 * kMs).grant(1, 5, 200 * kMs).enter(1, 5, 201 * kMs);
  drop.write(0, 4, 4, 250 * kMs).exit(0, 4, 251 * kMs).lease(0, 4, 2100 * kMs, 252 * kMs);
  drop.leave(1, 260 * kMs);
  EXPECT_EQ(check(drop.r, options()).exclusion_violations, 1u);
}

// PostgreSQL advisory: the killed holder's session ends and the server frees its lock at once,
// so a kill of THAT worker explains a grant right after; a kill of another worker, or a fault
// that took no effect, explains nothing.
TEST(TortureChecker, OnAdvisoryLocksOnlyAFaultThatEndedTheOlderHoldersSessionExcusesAnOverlap) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  h.acquire(1, 150 * kMs);
  h.fault(fault("kill", 300 * kMs, 300 * kMs, true, 0, h.pid_of(0)));
  h.grant(1, 5, 301 * kMs).enter(1, 5, 302 * kMs).leave(0, 303 * kMs);
  h.write(1, 5, 4, 304 * kMs).exit(1, 5, 305 * kMs).lease(1, 5, 2300 * kMs, 306 * kMs);
  h.hello(0, 310 * kMs, /*pid=*/999);
  CheckOptions advisory = options();
  advisory.validity_bound = false;
  Report killed = check(h.r, advisory);
  EXPECT_EQ(killed.exclusion_violations, 0u) << testing::PrintToString(killed.violations);
  EXPECT_EQ(killed.overlaps_excused, 1u);
  EXPECT_EQ(killed.verdict(), Verdict::kSafe);

  h.r.faults[0].worker = 2, h.r.faults[0].pid = h.pid_of(2);  // an uninvolved worker killed
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 1u);
  h.r.faults[0] = fault("drop", 290 * kMs, 300 * kMs, /*took_effect=*/false);  // reset nothing
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 1u);
  h.r.faults[0].took_effect = true;  // every proxied session was reset, worker 0's among them
  EXPECT_EQ(check(h.r, advisory).exclusion_violations, 0u);
}

// Not a violation: the stale one is the one entering. Worker 1 was granted token 5 and paused
// before its read; its lease ran out, worker 0 was granted 6 and is inside when worker 1 wakes
// and enters (to be refused by the fence). Only one lease was valid at that moment.
TEST(TortureChecker, AStaleHolderEnteringBesideTheValidOneIsNoExclusionViolation) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(1, 100 * kMs).grant(1, 5, 101 * kMs);
  h.acquire(0, 200 * kMs).grant(0, 6, 2200 * kMs).enter(0, 6, 2201 * kMs);
  h.enter(1, 5, 3000 * kMs, /*accepted=*/false).exit(1, 5, 3001 * kMs);
  h.lease(1, 5, 1 * kS, 3002 * kMs, true, 3 * kS);
  h.write(0, 6, 4, 3100 * kMs).exit(0, 6, 3101 * kMs).lease(0, 6, 4 * kS, 3102 * kMs);
  h.r.pauses = {{1, 102 * kMs, 2990 * kMs}};
  Report report = check(h.r, options());
  EXPECT_EQ(report.overlaps, 1u);
  EXPECT_EQ(report.overlaps_after_expiry, 1u);
  EXPECT_EQ(report.exclusion_violations, 0u);
  EXPECT_EQ(report.verdict(), Verdict::kSafe) << testing::PrintToString(report.violations);
}

// Blind spot 1 (second half): the fenced-violation count is recomputed from the log, so a gate
// that let a stale write through is caught even though it reported it as applied.
TEST(TortureChecker, AStaleWriteTheGateAppliedIsAFencedViolation) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  h.lease(0, 4, 300 * kMs, 900 * kMs, true, 290 * kMs);
  h.exit(0, 4, 103 * kMs);
  h.acquire(1, 400 * kMs).grant(1, 5, 401 * kMs).enter(1, 5, 402 * kMs);
  h.write(1, 5, 4, 403 * kMs).exit(1, 5, 404 * kMs).lease(1, 5, 2 * kS, 405 * kMs);
  h.write(0, 4, 5, 500 * kMs);  // applied although token 5 was admitted before
  Report report = check(h.r, options());
  EXPECT_EQ(report.fenced_violations, 1u);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);

  // After an admitted read of token 5 (full fence), a write of 4 is a violation even with no
  // write of 5 before it.
  History read_only;
  read_only.cycles(3, 1, 1, 0);
  read_only.acquire(0, 100 * kMs)
      .grant(0, 4, 101 * kMs)
      .enter(0, 4, 102 * kMs)
      .exit(0, 4, 103 * kMs);
  read_only.lease(0, 4, 300 * kMs, 104 * kMs);
  read_only.acquire(1, 400 * kMs).grant(1, 5, 401 * kMs).enter(1, 5, 402 * kMs);
  read_only.write(0, 4, 4, 403 * kMs).exit(1, 5, 404 * kMs).lease(1, 5, 2 * kS, 405 * kMs);
  EXPECT_EQ(check(read_only.r, options()).fenced_violations, 1u);
  EXPECT_EQ(check(read_only.r, options(FenceMode::kWriteOnly)).fenced_violations, 0u)
      << "a write-only fence promises nothing about reads";
}

// Blind spot 2: after the fence counter was deleted, grants went 1013, 1, 2, 3: each is below a
// grant that completed before it began. A token granted twice is a violation too.
TEST(TortureChecker, TokenRegressionsAndRepeatedTokensAreUnsafe) {
  History h;
  h.cycle(0, 1013, 1, 0).cycle(1, 1, 2, 100 * kMs).cycle(2, 2, 3, 200 * kMs);
  h.cycle(0, 3, 4, 300 * kMs);
  Report report = check(h.r, options());
  EXPECT_EQ(report.token_violations, 3u);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);

  History repeat;
  repeat.cycle(0, 7, 1, 0).cycle(1, 8, 2, 100 * kMs).cycle(2, 8, 3, 200 * kMs);
  EXPECT_EQ(check(repeat.r, options()).token_violations, 1u) << "8 after 8";

  // Not a regression: grants whose [asked, granted] windows overlap may be reported in either
  // order (worker 0 was told 20 first but told the register late, after worker 1's 21).
  History concurrent;
  concurrent.acquire(0, 0).acquire(1, 10 * kMs).grant(1, 21, 50 * kMs).grant(0, 20, 900 * kMs);
  concurrent.cycles(3, 22, 1, 1 * kS);
  EXPECT_EQ(check(concurrent.r, options()).token_violations, 0u);
}

// Blind spot 3: with a write-only fence (reads not fenced) two holders both read 10 and both
// write 11; the register must show the lost update.
TEST(TortureChecker, TheLostUpdateOfAWriteOnlyFenceIsUnsafe) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);    // A reads 3
  h.acquire(1, 200 * kMs).grant(1, 5, 2200 * kMs).enter(1, 5, 2201 * kMs);  // B reads 3
  h.write(0, 4, 4, 2300 * kMs).exit(0, 4, 2301 * kMs);                      // A writes 4
  h.lease(0, 4, 1 * kS, 2302 * kMs, true, 2299 * kMs);
  h.write(1, 5, 4, 2400 * kMs).exit(1, 5, 2401 * kMs).lease(1, 5, 4 * kS, 2402 * kMs);
  h.r.pauses = {{0, 150 * kMs, 2290 * kMs}};
  Report report = check(h.r, options(FenceMode::kWriteOnly));
  EXPECT_EQ(report.lost_updates, 1u);
  EXPECT_EQ(report.fenced_violations, 0u) << "the writes were in token order";
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);
}

// Blind spot 4: runs that did nothing, or whose faults never took effect, prove nothing.
TEST(TortureChecker, ARunWithoutGrantsIsInconclusive) {
  History h;
  h.hello(0, 0).acquire(0, 1 * kMs);  // a squatter holds the key: nobody is granted
  Report report = check(h.r, options());
  EXPECT_EQ(report.verdict(), Verdict::kInconclusive);
  ASSERT_EQ(report.inconclusive.size(), 2u);
  EXPECT_NE(report.inconclusive[0].find("only 0 grants"), std::string::npos);
  EXPECT_NE(report.inconclusive[1].find("only 0 writes"), std::string::npos);

  History some;
  some.cycles(3, 1, 1, 0);
  EXPECT_EQ(check(some.r, options()).verdict(), Verdict::kSafe);
  CheckOptions longer = options();
  longer.duration = 100s;  // floor 12
  EXPECT_EQ(check(some.r, longer).verdict(), Verdict::kInconclusive);
}

// Blind spot 5: a pause excuses a late lost() only if it overlaps [valid_until, fired_at]; a
// callback that never ran and a validity that passed without lost() are violations.
TEST(TortureChecker, LateMissingAndAbsentLostSignalsAreUnsafeUnlessAPauseCoversTheLateness) {
  History h;
  h.cycles(3, 1, 1, 0);
  // 10 s late; a 1 ms pause at the start of the lease does not excuse it.
  h.lease(1, 7, 1 * kS, 11 * kS, true, 11 * kS);
  h.r.pauses = {{1, 0, 1 * kMs}};
  Report report = check(h.r, options());
  EXPECT_EQ(report.late_lost, 1u);
  EXPECT_EQ(report.max_lost_delay, 10 * kS);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);
  h.r.pauses = {{1, 2 * kS, 10900 * kMs}};
  EXPECT_EQ(check(h.r, options()).late_lost, 0u) << "the pause covers the lateness";

  // A pause that began after lost() fired excuses nothing (its window is [stop, continue]).
  h.r.pauses = {{1, 11100 * kMs, 12 * kS}};
  EXPECT_EQ(check(h.r, options()).late_lost, 1u);

  History missing;
  missing.cycles(3, 1, 1, 0);
  missing.lease(1, 7, 1 * kS, 900 * kMs, true, 900 * kMs, /*callback_ran=*/false);
  EXPECT_EQ(check(missing.r, options()).late_lost, 1u) << "lost() without its callback";
  // A loss reported with no callback time (fired_at 0) is a callback that never ran, however
  // the report's flag reads.
  History zero;
  zero.cycles(3, 1, 1, 0);
  zero.lease(1, 7, 1 * kS, 1300 * kMs, true, /*fired_at=*/0, /*callback_ran=*/true);
  EXPECT_EQ(check(zero.r, options()).late_lost, 1u) << "the old at=0 blind spot";

  History absent;
  absent.cycles(3, 1, 1, 0);
  absent.lease(1, 7, 1 * kS, 1300 * kMs, /*lost=*/false);
  report = check(absent.r, options());
  EXPECT_EQ(report.unsignalled_expiries, 1u);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);
  absent.r.pauses = {{1, 900 * kMs, 1250 * kMs}};
  EXPECT_EQ(check(absent.r, options()).unsignalled_expiries, 0u);
}

// admin-delete: the lock is taken from worker 0 (token 4) behind its back at 150 ms and worker 1
// is granted at once. The overlap is excused only if worker 0 learned of it (lost()) within a
// renewal period plus slack (TTL 2 s: 667 + 200 ms); a holder that learned later or never is
// unsafe, and so is a lock left held after the run.
TEST(TortureChecker, AnAdminDeleteIsExcusedOnlyForAHolderThatLearnsWithinARenewalPeriod) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  h.fault(fault("admin-delete", 150 * kMs, 2150 * kMs, true, 0, h.pid_of(0)));
  h.acquire(1, 160 * kMs).grant(1, 5, 200 * kMs).enter(1, 5, 201 * kMs);
  h.write(1, 5, 4, 202 * kMs).exit(1, 5, 203 * kMs).lease(1, 5, 2 * kS, 204 * kMs);
  h.write(0, 4, 4, 1000 * kMs, /*accepted=*/false).exit(0, 4, 1001 * kMs);
  h.lease(0, 4, /*valid_until=*/2100 * kMs, /*observed_at=*/1100 * kMs, /*lost=*/true,
          /*fired_at=*/500 * kMs);
  CheckOptions o = options();
  o.requested_faults = {"admin-delete"};
  Report told = check(h.r, o);
  EXPECT_EQ(told.verdict(), Verdict::kSafe)
      << testing::PrintToString(told.violations) << testing::PrintToString(told.inconclusive);
  EXPECT_EQ(told.overlaps_excused, 1u);
  EXPECT_EQ(told.deletions_unnoticed, 0u);
  EXPECT_EQ(told.by_fault["admin-delete"].effective, 1u);

  h.r.leases.back().fired_at = 1050 * kMs;  // learned 900 ms after the delete
  Report late = check(h.r, o);
  EXPECT_EQ(late.verdict(), Verdict::kUnsafe);
  EXPECT_EQ(late.deletions_unnoticed, 1u);
  EXPECT_EQ(late.exclusion_violations, 1u);

  h.r.leases.back().lost = false;  // let go in time without being told (a fenced write ended it)
  h.r.leases.back().fired_at = 0;
  h.r.leases.back().observed_at = 1010 * kMs;
  Report let_go = check(h.r, o);
  EXPECT_EQ(let_go.verdict(), Verdict::kSafe) << testing::PrintToString(let_go.violations);
  EXPECT_EQ(let_go.overlaps_excused, 1u);

  h.r.leases.back().observed_at = 1100 * kMs;  // never learned, and held on past the bound
  Report never = check(h.r, o);
  EXPECT_EQ(never.deletions_unnoticed, 1u);
  EXPECT_EQ(never.verdict(), Verdict::kUnsafe);
  ASSERT_FALSE(never.violations.empty());
  EXPECT_NE(testing::PrintToString(never.violations).find("never learned"), std::string::npos);

  // No lease held at the moment of the delete: it proves nothing.
  History idle;
  idle.cycles(3, 1, 1, 0);
  idle.fault(fault("admin-delete", 5 * kS, 6 * kS));
  EXPECT_EQ(check(idle.r, o).verdict(), Verdict::kInconclusive);
}

TEST(TortureChecker, ALockStillHeldAfterEveryWorkerExitedIsUnsafe) {
  History h;
  h.cycles(3, 1, 1, 0);
  EXPECT_EQ(check(h.r, options()).verdict(), Verdict::kSafe);
  h.r.left_held = "'torture' still held by 1a2b3c4d (token 3) after every worker exited";
  Report report = check(h.r, options());
  EXPECT_EQ(report.left_held, 1u);
  EXPECT_EQ(report.verdict(), Verdict::kUnsafe);
}

TEST(TortureChecker, UnavailabilityIsMeasuredFromEachHealToTheNextAdmittedCriticalSection) {
  History h;
  h.enter(0, 5, 100 * kMs).enter(1, 6, 900 * kMs, /*accepted=*/false).enter(1, 7, 1500 * kMs);
  h.fault(fault("drop", 0, 200 * kMs)).fault(fault("pause", 1000 * kMs, 1400 * kMs));
  h.r.ended_at = 2000 * kMs;
  Report report = check(h.r, options());
  EXPECT_EQ(report.faults, 2u);
  EXPECT_EQ(report.by_fault["drop"].max_unavailable,
            1300 * kMs);  // the refused enter does not count
  EXPECT_EQ(report.by_fault["pause"].max_unavailable, 100 * kMs);
  EXPECT_EQ(report.max_unavailable, 1300 * kMs);
}

}  // namespace
}  // namespace fencelock::torture
