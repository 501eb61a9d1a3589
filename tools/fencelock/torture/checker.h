// The torture checker: pure analysis of a RunRecord (no I/O), unit-tested with hand-made histories
// (tests/unit/torture_checker_test.cpp, torture_fault_evidence_test.cpp), one per property: each
// verdict must be able to fail.
//
// Safety (each must be 0, else the verdict is UNSAFE):
//   fenced_violations     an applied write whose token is below one the fence had admitted before
//                         it (full fence: any admitted read or write; write-only and none: any
//                         applied write), recomputed from the register's log with the checker's
//                         own comparison, not taken from the gate that decided
//   lost_updates          applied increments minus the final value
//   token_violations      a grant whose token is not above the token of every grant that had
//                         completed before it began (register clock), or a token granted twice
//   exclusion_violations  a critical section that began while another holder was inside and
//                         both leases were still valid by their holders' own valid_until(),
//                         unless excused: a clock was faked (skew); an admin-delete took the
//                         older lease and its holder learned in time (below); or, only where a
//                         lock is freed the moment its holder's session ends (PostgreSQL
//                         advisory, `validity_bound` false), a fault that took effect ended the
//                         older holder's session at most one TTL before: a kill of that very
//                         worker (which left no report), or a drop, partition, server-kill or
//                         failover after which it was told its lease was lost. Where a lock
//                         lives until it expires (Redis, Redlock, lease mode, etcd) no kill or
//                         network fault explains a second grant, and a missing report is no
//                         excuse: only a report shows a validity that had passed
//   late_lost             lost() fired more than `lost_allowance` after valid_until(), or its
//                         callback had not run 100 ms after the token fired, with no pause of
//                         that worker overlapping [valid_until, fired_at]
//   unsignalled_expiries  a lease whose validity passed without lost() firing (same excuse)
//   deletions_unnoticed   admin-delete took the lock (with evidence that it did, below) from a
//                         holder (granted before the delete began) that kept its lease past
//                         the learning bound (TTL/3 + max(TTL/10, 200 ms) after the delete was
//                         over) without lost() firing by then; overlaps with the next holder
//                         are excused only for a holder that learned within that bound
//   left_held             the lock was still held, with a token granted in the run, a TTL after
//                         every worker had exited (a lock held by nobody)
// Observed (not violations): overlaps (critical sections that began while another was open),
// split into those after the older lease's validity (the fence must absorb them) and excused
// ones; stale refusals; lost() signals; unavailability after each fault's heal.
//
// A run that proves nothing is INCONCLUSIVE (never SAFE): fewer grants or applied writes than the
// floor max(3, duration / (4 TTL)); a fault kind asked for that was never injected or never took
// effect (pause: the worker was stopped and then lost its lease or had a read or write refused;
// kill: it died of SIGKILL and a new worker said hello; skew: the new worker's clock ran at less
// than half speed; jump: its wall clock was 20 s or more behind; network faults: the proxies
// delayed, reset or froze a connection; many-leases: every worker held its extra leases); a
// control program that failed. For the faults of the server-control program its exit status is
// never enough: server-kill: a probe after the kill was refused and one after the restart
// answered; minority-stall: a probe after the pause went unanswered (silent) and one after the
// resume answered; failover: the old primary refused, the standby answered; evict: INFO showed
// evicted_keys grown, or the fill took a server past its maxmemory; admin-delete: the holder it
// hit (inside when it began) fired lost() for a lease granted before it, or another worker was
// granted while that holder was still inside, or the lock inspected around the delete left the
// holder's token while it was still inside.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "torture/events.h"

namespace fencelock::torture {

enum class Verdict { kSafe, kUnsafe, kInconclusive };

// "SAFE", "UNSAFE", "INCONCLUSIVE".
const char* verdict_name(Verdict verdict);

struct CheckOptions {
  std::chrono::nanoseconds ttl{std::chrono::seconds(2)};        // the workers' lease TTL
  std::chrono::nanoseconds duration{std::chrono::seconds(30)};  // the run's length
  // How late after valid_until() a lost() signal may fire before it counts (timer and
  // scheduling slack of an unpaused process).
  std::chrono::nanoseconds lost_allowance{std::chrono::milliseconds(25)};
  FenceMode fence = FenceMode::kFull;
  // False for a backend that promises no validity (PostgreSQL advisory locks: the server frees a
  // lock the moment its session dies).
  bool validity_bound = true;
  std::vector<std::string> requested_faults;  // the kinds asked for
};

struct Report {
  std::uint64_t operations = 0;  // register reads, writes and exits
  std::uint64_t grants = 0;
  std::uint64_t writes_applied = 0;
  std::uint64_t writes_rejected = 0;  // stale reads and writes refused by the fence
  std::uint64_t faults = 0;

  std::uint64_t fenced_violations = 0;
  std::uint64_t lost_updates = 0;
  std::uint64_t token_violations = 0;
  std::uint64_t exclusion_violations = 0;
  std::uint64_t late_lost = 0;
  std::uint64_t unsignalled_expiries = 0;
  std::uint64_t deletions_unnoticed = 0;
  std::uint64_t left_held = 0;

  std::uint64_t overlaps = 0;
  std::uint64_t overlaps_after_expiry = 0;
  std::uint64_t overlaps_excused = 0;
  std::uint64_t lost_signals = 0;
  Nanos max_lost_delay = 0;  // over unexcused signals: fired_at - valid_until, if positive
  Nanos max_unavailable = 0;
  struct PerFault {
    std::uint64_t count = 0;
    std::uint64_t effective = 0;  // injections with evidence that they took effect
    Nanos max_unavailable = 0;
  };
  std::map<std::string, PerFault> by_fault;  // by fault kind

  std::vector<std::string> violations;    // the first few, described (at most 20)
  std::vector<std::string> inconclusive;  // why the run proves nothing

  std::uint64_t violation_count() const {
    return fenced_violations + lost_updates + token_violations + exclusion_violations + late_lost +
           unsignalled_expiries + deletions_unnoticed + left_held;
  }
  Verdict verdict() const {
    if (violation_count() > 0) return Verdict::kUnsafe;
    return inconclusive.empty() ? Verdict::kSafe : Verdict::kInconclusive;
  }
  bool safe() const { return verdict() == Verdict::kSafe; }
};

Report check(const RunRecord& record, const CheckOptions& options);

}  // namespace fencelock::torture
