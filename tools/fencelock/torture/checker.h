// The torture checker: pure analysis of a RunRecord (no I/O), unit-tested with hand-made logs.
//
//   fenced_violations  writes applied with a token lower than one applied before (must be 0)
//   lost_updates       applied increments minus the final value (must be 0)
//   overlaps           critical sections that began while another was open (raw mutual exclusion;
//                      expected 0 without faults, may be > 0 under pauses: fencing absorbs them)
//   late_lost          lost() fired after valid_until() + allowance, on a worker that was not
//                      paused during that lease (must be 0)
//   max_unavailable    longest time from a fault's heal to the next admitted critical section
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "torture/events.h"

namespace fencelock::torture {

struct Report {
  std::uint64_t operations = 0;  // register operations
  std::uint64_t grants = 0;
  std::uint64_t writes_applied = 0;
  std::uint64_t writes_rejected = 0;  // stale writes and stale reads refused by the fence
  std::uint64_t fenced_violations = 0;
  std::uint64_t lost_updates = 0;
  std::uint64_t overlaps = 0;
  std::uint64_t late_lost = 0;
  std::uint64_t lost_signals = 0;
  std::uint64_t faults = 0;
  Nanos max_unavailable = 0;
  struct PerFault {
    std::uint64_t count = 0;
    Nanos max_unavailable = 0;
  };
  std::map<std::string, PerFault> by_fault;  // by fault kind
  Nanos max_lost_delay = 0;  // over non-paused workers: fired_at - valid_until, if positive

  // No fenced violation, no lost update, no late lost() signal.
  bool safe() const { return fenced_violations == 0 && lost_updates == 0 && late_lost == 0; }
};

// `lost_allowance`: how late after valid_until() a lost() signal may fire before it counts
// (timer and scheduling slack of an unpaused process).
Report check(const RunRecord& record, std::chrono::nanoseconds lost_allowance);

}  // namespace fencelock::torture
