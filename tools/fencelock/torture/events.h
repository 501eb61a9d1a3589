// What a torture run records, as plain data: the register's log of everything the workers told it
// (starts, acquisition attempts, grants, critical-section operations, closed connections), each
// worker's lease reports, and the faults the orchestrator injected with what it saw of their
// effect. The checker (checker.h) turns them into a report. Times are CLOCK_MONOTONIC nanoseconds
// (steady_clock), comparable across the processes of one machine; the register stamps its events
// with its own clock, so they stay true when a worker's clock is faked (the skew fault).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fencelock::torture {

using Nanos = std::int64_t;

// How the register guards its value (--fence).
enum class FenceMode {
  kFull,       // fenced reads and writes (FenceGate::admit on ENTER, run on WRITE)
  kWriteOnly,  // only writes fenced: the lost update of a write-only fence must show
  kNone,       // nothing fenced: the broken variant
};

struct RegisterEvent {
  enum Kind {
    kHello,    // a worker process started (pid, its clocks)
    kAcquire,  // a worker is about to call acquire() (its clocks)
    kGrant,    // acquire() returned a lease with `token`
    kEnter,    // the critical section's read
    kWrite,    // its write
    kExit,     // its end
    kLeave,    // the worker's connection closed (a killed or stopped worker)
    kTick,     // the worker's clocks, every 200 ms of its own steady clock
  };
  Kind kind = kEnter;
  int worker = 0;
  long pid = 0;  // the worker process that sent it (from its kHello)
  std::uint64_t token = 0;
  // enter: the read was admitted; write: the register's value was assigned (recorded by the
  // code that assigns it, not taken from the gate's verdict).
  bool accepted = false;
  std::uint64_t value = 0;    // enter: the value read; write: the value written
  std::uint64_t highest = 0;  // enter, write: the gate's highest token after it (for display)
  Nanos at = 0;               // the register's steady clock
  Nanos wall = 0;             // the register's wall clock
  Nanos worker_steady = 0;    // the worker's own steady clock when it sent the request
  Nanos worker_wall = 0;      // the worker's own wall clock when it sent the request
};

// One grant, from the register's clock: between `asked_at` (the worker's last kAcquire) and `at`
// (its kGrant) the server granted it.
struct GrantRecord {
  int worker = 0;
  long pid = 0;
  std::uint64_t token = 0;
  Nanos asked_at = 0;
  Nanos at = 0;
};

// A worker's account of one lease, written after its critical section and before its release
// (worker clock: fake for a skewed worker).
struct LeaseReport {
  int worker = 0;
  long pid = 0;
  std::uint64_t token = 0;
  Nanos granted_at = 0;
  Nanos valid_until = 0;     // the lease's valid_until() when the report was written
  bool lost = false;         // lost() had fired
  bool callback_ran = true;  // the on_lost() callback ran (within 100 ms of lost())
  Nanos fired_at = 0;        // lost: when the callback ran (or observed_at when it had not)
  Nanos observed_at = 0;     // when the worker looked
};

struct PauseWindow {
  int worker = 0;
  Nanos from = 0;
  Nanos to = 0;
};

// What one probe of a server saw (server_probe.h): a fresh connection, one request of the
// server's own protocol, a short deadline for any reaction.
enum class ProbeResult {
  kNotProbed,  // no probe ran
  kAnswered,   // a reply came, or the server closed the connection: its process runs
  kSilent,     // the connection opened and nothing came back by the deadline: a stopped process
  kRefused,    // the connection was refused or reset: nothing listens
  kUnknown,    // the host did not resolve or the socket failed: no evidence either way
};

// "not probed", "answered", "silent", "refused", "unknown".
const char* probe_result_name(ProbeResult result);

struct InjectedFault {
  std::string kind;  // pause, kill, latency, drop, partition, skew, jump, server-kill
  Nanos at = 0;
  Nanos healed_at = 0;
  int worker = -1;  // pause, kill, skew, jump: the worker it hit
  long pid = 0;     // pause, kill, jump: that worker's process; skew: the skewed process
  // What the orchestrator saw of the fault's effect (the checker adds what the logs and the
  // evidence below show): pause: the process was seen stopped; kill: it died of SIGKILL;
  // latency/drop/partition/delay-one: the proxies delayed, reset or froze something; the faults
  // of the server-control program (server-kill, minority-stall, evict, admin-delete, failover):
  // every call of the program exited 0, which alone proves nothing (a `true` would do).
  bool took_effect = false;
  Nanos done_at = 0;  // admin-delete: when the control program returned (the delete was over)
  std::string note;   // why not, or a detail ("control program exited 1")
  // The hit server probed while the fault was on and after it healed: minority-stall: after the
  // pause (silent expected) and after the resume (answered); server-kill: after the kill
  // (refused) and after the restart (answered); failover: the old primary after the failover
  // (refused) and the standby (answered).
  ProbeResult probe_during = ProbeResult::kNotProbed;
  ProbeResult probe_after = ProbeResult::kNotProbed;
  // evict: INFO of every server before and after the fill: evicted_keys summed over the
  // servers read both times (-1: none was), and whether the fill took a server's used_memory
  // from within its maxmemory to above it (a noeviction server then refuses writes).
  std::int64_t evicted_before = -1;
  std::int64_t evicted_after = -1;
  bool filled_up = false;
  // admin-delete: the lock inspected just before the delete began and just after it was over
  // (`inspected_at`): the holder's owner prefix ("" when free or not inspected) and token (0:
  // none known).
  std::string holder_before;
  std::uint64_t token_before = 0;
  std::string holder_after;
  std::uint64_t token_after = 0;
  Nanos inspected_at = 0;
};

struct RunRecord {
  std::vector<RegisterEvent> register_events;  // in the order the register applied them
  std::uint64_t final_value = 0;
  std::vector<LeaseReport> leases;
  std::vector<PauseWindow> pauses;
  std::vector<InjectedFault> faults;
  std::vector<GrantRecord> grant_log;         // from register_events, by `at`
  std::vector<std::string> control_failures;  // server-control runs that exited non-zero
  // After every worker exited (and a TTL more): who still held the lock, "" if nobody.
  std::string left_held;
  Nanos started_at = 0;
  Nanos ended_at = 0;
  std::uint64_t operations_so_far = 0;  // register operations, updated for progress reports
};

// The grants of `events` (each kGrant with the worker's kAcquire before it), ordered by `at`.
std::vector<GrantRecord> grants_of(const std::vector<RegisterEvent>& events);

}  // namespace fencelock::torture
