// The torture checker's evidence that a fault took effect (checker.h, "INCONCLUSIVE"), on
// hand-made histories (torture_history.h): a fault counts only when the logs or what the
// orchestrator saw of the servers show it; a command that exited 0 is never enough.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "torture/checker.h"
#include "torture_history.h"

namespace fencelock::torture {
namespace {

using namespace std::chrono_literals;

TEST(TortureChecker, FaultsThatNeverTookEffectOrAFailedControlProgramAreInconclusive) {
  History h;
  h.cycles(5, 1, 1, 0);
  CheckOptions o = options();
  o.requested_faults = {"server-kill"};
  EXPECT_EQ(check(h.r, o).verdict(), Verdict::kInconclusive) << "never injected";

  h.fault(fault("server-kill", 10 * kMs, 20 * kMs, /*took_effect=*/false));
  h.r.faults.back().note = "the control program's kill failed";
  h.r.control_failures = {"'/bin/false kill 6379' exited 1"};
  Report report = check(h.r, o);
  EXPECT_EQ(report.verdict(), Verdict::kInconclusive);
  EXPECT_EQ(report.by_fault["server-kill"].count, 1u);
  EXPECT_EQ(report.by_fault["server-kill"].effective, 0u);
  ASSERT_EQ(report.inconclusive.size(), 2u);
  EXPECT_NE(report.inconclusive[0].find("kill failed"), std::string::npos);
  EXPECT_NE(report.inconclusive[1].find("exited 1"), std::string::npos);

  h.r.control_failures.clear();
  h.r.faults.back().took_effect = true;
  h.r.faults.back().probe_during = ProbeResult::kRefused;
  h.r.faults.back().probe_after = ProbeResult::kAnswered;
  EXPECT_EQ(check(h.r, o).verdict(), Verdict::kSafe);

  // A latency fault that delayed nothing is no evidence either, however many were injected.
  History net;
  net.cycles(5, 1, 1, 0);
  net.fault(fault("latency", 0, 10 * kMs, false))
      .fault(fault("latency", 20 * kMs, 30 * kMs, false));
  CheckOptions latency = options();
  latency.requested_faults = {"latency"};
  EXPECT_EQ(check(net.r, latency).verdict(), Verdict::kInconclusive);
  net.r.faults[1].took_effect = true;
  EXPECT_EQ(check(net.r, latency).verdict(), Verdict::kSafe);
}

// A server-control program that exits 0 and does nothing (`true`) made minority-stall and evict
// count as injected, and the run SAFE. Each fault of the control program now needs what the
// server itself showed.
TEST(TortureChecker, FaultsOfTheControlProgramNeedWhatTheServersShowedNotItsExitStatus) {
  CheckOptions o = options();
  const auto verdict = [&](const InjectedFault& f) {
    History h;
    h.cycles(5, 1, 1, 0);
    h.fault(f);
    o.requested_faults = {f.kind};
    Report report = check(h.r, o);
    EXPECT_EQ(report.by_fault[f.kind].count, 1u);
    return report.verdict();
  };
  // Every call of the program exited 0 (took_effect), and nothing else was seen.
  for (const char* kind : {"minority-stall", "server-kill", "failover", "evict"}) {
    EXPECT_EQ(verdict(fault(kind, 10 * kMs, 40 * kMs)), Verdict::kInconclusive) << kind;
  }

  InjectedFault stall = fault("minority-stall", 10 * kMs, 40 * kMs);
  stall.probe_during = ProbeResult::kAnswered;  // the "paused" server answered: `true`
  stall.probe_after = ProbeResult::kAnswered;
  EXPECT_EQ(verdict(stall), Verdict::kInconclusive);
  stall.probe_during = ProbeResult::kSilent;
  EXPECT_EQ(verdict(stall), Verdict::kSafe);
  stall.probe_after = ProbeResult::kSilent;  // it never came back
  EXPECT_EQ(verdict(stall), Verdict::kInconclusive);
  stall.probe_after = ProbeResult::kAnswered;
  stall.took_effect = false;  // the resume failed
  EXPECT_EQ(verdict(stall), Verdict::kInconclusive);

  InjectedFault kill = fault("server-kill", 10 * kMs, 40 * kMs);
  kill.probe_during = ProbeResult::kAnswered;  // still there after the "kill"
  kill.probe_after = ProbeResult::kAnswered;
  EXPECT_EQ(verdict(kill), Verdict::kInconclusive);
  kill.probe_during = ProbeResult::kUnknown;  // a host that did not resolve: no evidence
  EXPECT_EQ(verdict(kill), Verdict::kInconclusive);
  kill.probe_during = ProbeResult::kRefused;
  EXPECT_EQ(verdict(kill), Verdict::kSafe);
  kill.probe_after = ProbeResult::kRefused;  // never restarted: no restart was tested
  EXPECT_EQ(verdict(kill), Verdict::kInconclusive);

  InjectedFault failover = fault("failover", 10 * kMs, 40 * kMs);
  failover.probe_during = ProbeResult::kRefused;
  failover.probe_after = ProbeResult::kUnknown;  // no standby in the URI
  EXPECT_EQ(verdict(failover), Verdict::kInconclusive);
  failover.probe_after = ProbeResult::kAnswered;
  EXPECT_EQ(verdict(failover), Verdict::kSafe);

  InjectedFault evict = fault("evict", 10 * kMs, 40 * kMs);
  evict.evicted_before = 12, evict.evicted_after = 12;  // INFO read, nothing evicted
  EXPECT_EQ(verdict(evict), Verdict::kInconclusive);
  evict.evicted_after = 40;
  EXPECT_EQ(verdict(evict), Verdict::kSafe);
  evict.evicted_before = -1, evict.evicted_after = -1;  // INFO unreadable
  EXPECT_EQ(verdict(evict), Verdict::kInconclusive);
  evict.filled_up = true;  // the fill took a noeviction server past its maxmemory
  EXPECT_EQ(verdict(evict), Verdict::kSafe);
}

// admin-delete: worker 0 is in a long critical section when the delete begins, and keeps its
// lease past the learning bound without lost(); nobody else is granted meanwhile. Whether the
// delete did anything shows only in the inspections around it: the lock still held under token
// 4 is a control program that did nothing (before: "a lease was held", so effective, and the
// holder that never learned made the run UNSAFE); the lock found free is a delete its holder
// never learned of (UNSAFE).
TEST(TortureChecker, AnAdminDeleteNeedsEvidenceThatItTookTheLock) {
  History h;
  h.cycles(3, 1, 1, 0);
  h.acquire(0, 100 * kMs).grant(0, 4, 101 * kMs).enter(0, 4, 102 * kMs);
  InjectedFault del = fault("admin-delete", 150 * kMs, 2150 * kMs, true, 0, h.pid_of(0));
  del.done_at = 155 * kMs;
  del.inspected_at = 156 * kMs;
  del.holder_before = del.holder_after = "1a2b3c4d";
  del.token_before = del.token_after = 4;
  h.fault(del);
  h.acquire(1, 160 * kMs);
  h.write(0, 4, 4, 1000 * kMs).exit(0, 4, 1001 * kMs).lease(0, 4, 2100 * kMs, 1050 * kMs);
  h.grant(1, 5, 1100 * kMs).enter(1, 5, 1101 * kMs).write(1, 5, 5, 1102 * kMs);
  h.exit(1, 5, 1103 * kMs).lease(1, 5, 3100 * kMs, 1104 * kMs);
  h.r.leases.back().granted_at = 1100 * kMs;  // after the delete: not one it took
  CheckOptions o = options();
  o.requested_faults = {"admin-delete"};
  Report nothing = check(h.r, o);
  EXPECT_EQ(nothing.verdict(), Verdict::kInconclusive)
      << testing::PrintToString(nothing.violations);
  EXPECT_EQ(nothing.by_fault["admin-delete"].effective, 0u);
  EXPECT_EQ(nothing.deletions_unnoticed, 0u) << "a delete that took nothing is no delete";

  h.r.faults[0].holder_after = "", h.r.faults[0].token_after = 0;  // found free: it took the lock
  Report unnoticed = check(h.r, o);
  EXPECT_EQ(unnoticed.by_fault["admin-delete"].effective, 1u);
  EXPECT_EQ(unnoticed.deletions_unnoticed, 1u);
  EXPECT_EQ(unnoticed.verdict(), Verdict::kUnsafe);

  h.r.faults[0].inspected_at = 0;  // not inspected, but worker 0 learned of it in time
  h.r.leases[3].lost = true;
  h.r.leases[3].fired_at = 500 * kMs;
  Report told = check(h.r, o);
  EXPECT_EQ(told.by_fault["admin-delete"].effective, 1u);
  EXPECT_EQ(told.verdict(), Verdict::kSafe) << testing::PrintToString(told.violations);

  h.r.faults[0].pid = 0;  // nobody was inside when it began
  EXPECT_EQ(check(h.r, o).verdict(), Verdict::kInconclusive);
}

// A pause counts only when the paused worker then lost its lease or was refused; a kill only
// when a new worker started in its place.
TEST(TortureChecker, PauseAndKillNeedEvidenceInTheLogs) {
  History h;
  h.cycles(5, 1, 1, 0);
  h.r.pauses = {{1, 100 * kMs, 200 * kMs}};
  h.fault(fault("pause", 100 * kMs, 200 * kMs, true, 1, h.pid_of(1)));  // worker 1 held nothing
  h.fault(fault("kill", 300 * kMs, 300 * kMs, true, 2, h.pid_of(2)));
  CheckOptions o = options();
  o.requested_faults = {"pause", "kill"};
  Report report = check(h.r, o);
  EXPECT_EQ(report.verdict(), Verdict::kInconclusive);
  EXPECT_EQ(report.by_fault["pause"].effective, 0u);
  EXPECT_EQ(report.by_fault["kill"].effective, 0u);

  h.hello(2, 310 * kMs, /*pid=*/999);            // the replacement of worker 2
  h.enter(1, 3, 150 * kMs, /*accepted=*/false);  // worker 1's stale read refused
  h.exit(1, 3, 151 * kMs);
  report = check(h.r, o);
  EXPECT_EQ(report.by_fault["pause"].effective, 1u);
  EXPECT_EQ(report.by_fault["kill"].effective, 1u);
  EXPECT_EQ(report.verdict(), Verdict::kSafe)
      << testing::PrintToString(report.violations) << testing::PrintToString(report.inconclusive);
}

// Clock faults: the skewed worker's clock must be seen running slow, the jumped one's wall clock
// behind; the skewed worker's own account (fake clock) is not held against it.
TEST(TortureChecker, ClockFaultsNeedTheirClocksSeenAndASkewedAccountIsExcused) {
  History h;
  h.cycles(5, 1, 1, 0);
  const long skewed = 555;
  h.hello(1, 1 * kS, skewed, /*steady=*/1 * kS);
  h.acquire(1, 3 * kS, skewed, /*steady=*/1 * kS + 500 * kMs);  // 0.5 s in 2 s: a quarter
  h.fault(fault("skew", 1 * kS, 6 * kS, true, 1, skewed));
  h.acquire(2, 7 * kS, 0, -1, /*wall_offset=*/-30 * kS);
  h.fault(fault("jump", 6500 * kMs, 8 * kS, true, 2, h.pid_of(2)));
  // The skewed worker reports a lease "lost" 3 s late by its fake clock.
  h.lease(1, 9, 1 * kS, 4 * kS, true, 4 * kS, true, skewed);
  CheckOptions o = options();
  o.requested_faults = {"skew", "jump"};
  Report report = check(h.r, o);
  EXPECT_EQ(report.by_fault["skew"].effective, 1u);
  EXPECT_EQ(report.by_fault["jump"].effective, 1u);
  EXPECT_EQ(report.late_lost, 0u);
  EXPECT_EQ(report.verdict(), Verdict::kSafe) << testing::PrintToString(report.inconclusive);

  h.r.register_events[h.r.register_events.size() - 2].worker_steady = 2 * kS + 900 * kMs;
  h.r.register_events.back().worker_wall = h.r.register_events.back().wall;
  report = check(h.r, o);
  EXPECT_EQ(report.by_fault["skew"].effective, 0u) << "a clock at full speed is no skew";
  EXPECT_EQ(report.by_fault["jump"].effective, 0u);
  EXPECT_EQ(report.verdict(), Verdict::kInconclusive);
}

}  // namespace
}  // namespace fencelock::torture
