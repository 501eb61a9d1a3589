// What a torture run records, as plain data: the register's log of critical-section operations,
// each worker's grants and lost() signals, and the faults the orchestrator injected. The checker
// (checker.h) turns them into a report. Times are CLOCK_MONOTONIC nanoseconds (steady_clock),
// comparable across the processes of one machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fencelock::torture {

using Nanos = std::int64_t;

struct RegisterEvent {
  enum Kind { kEnter, kWrite, kExit };
  Kind kind = kEnter;
  int worker = 0;
  std::uint64_t token = 0;
  bool accepted = false;    // enter: the fenced read was admitted; write: the write was applied
  std::uint64_t value = 0;  // enter: the value read; write: the value written
  bool overlapped = false;  // enter: another worker was inside its critical section
  std::uint64_t highest = 0;  // the fence's highest token after this operation
  Nanos at = 0;
};

struct GrantRecord {
  int worker = 0;
  std::uint64_t token = 0;
  Nanos at = 0;
};

struct LostSignal {
  int worker = 0;
  std::uint64_t token = 0;
  Nanos granted_at = 0;
  Nanos fired_at = 0;
  Nanos valid_until = 0;  // the lease's valid_until() when lost() fired
};

struct PauseWindow {
  int worker = 0;
  Nanos from = 0;
  Nanos to = 0;
};

struct InjectedFault {
  std::string kind;  // pause, kill, latency, drop, partition
  Nanos at = 0;
  Nanos healed_at = 0;
};

struct RunRecord {
  std::vector<RegisterEvent> register_events;  // in the order the register applied them
  std::uint64_t final_value = 0;
  std::vector<LostSignal> lost;
  std::vector<PauseWindow> pauses;
  std::vector<InjectedFault> faults;
  std::vector<GrantRecord> grant_log;  // every grant, in log order per worker
  Nanos started_at = 0;
  Nanos ended_at = 0;
  std::uint64_t operations_so_far = 0;  // register operations, updated for progress reports
};

}  // namespace fencelock::torture
