// The orchestrator of a torture run: starts the shared register, a FaultProxy per server when
// network faults are asked for, and the worker processes (this program re-executed as
// `fencelock torture-worker`), injects the faults on a schedule, stops the workers and gathers
// the RunRecord for the checker. Used by `fencelock torture` and `fencelock demo`.
//
// Schedule: the first fault one TTL after the start, then one TTL after each heal, the kinds in
// the order given, round robin; no fault starts later than 2 TTL before the end. A pause heals
// (SIGCONT) at a moment another worker is between its read and its write, if one comes within a
// TTL: the paused holder's stale write then lands inside the newer holder's read-modify-write,
// which only a fenced read can refuse.
//
// delay-one holds one chunk on one connection to one server for 1.5 TTL (in turn a request and a
// reply) while the rest flows. cancel-race makes the workers' waits end (time out or be
// cancelled) about when a holder releases, for 2 TTL (SIGUSR1, SIGUSR2). evict runs `PROGRAM fill
// PORT` on every server (memory pressure). minority-stall runs `PROGRAM pause PORT` and, 1.5 TTL
// later, `PROGRAM resume PORT` (one server at a time); admin-delete runs `PROGRAM admin-delete KIND
// KEY` (KIND redis, etcd, postgres-lease or postgres-advisory) once a worker has been between its
// read and its write for a while (a long critical section; waited for up to one TTL); many-leases
// is no injection but a condition of the whole run (each worker holds `extra_leases` long leases
// besides the contended one; the scheduled faults wait, at most half the run, until every worker
// holds them), recorded as one fault spanning the run. After the workers exit, the orchestrator
// inspects the lock (RunRecord::left_held).
//
// Each fault records what the orchestrator saw of its effect (events.h InjectedFault); the
// server-control program runs by fork/exec with an argument vector (no shell). Its exit status
// is never the only evidence: the orchestrator probes the server it hit (server_probe.h: silent
// while paused, refusing while killed, answering afterwards) and reads a Redis's INFO around a
// fill, and the checker decides from those records.
//
// Thread-safety: run_torture() blocks; call it from one thread at a time per directory.
#pragma once

#include <chrono>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

#include "torture/events.h"

namespace fencelock::torture {

struct RunSettings {
  int workers = 3;
  std::chrono::milliseconds duration{30'000};
  std::chrono::milliseconds ttl{2'000};
  std::chrono::milliseconds critical{20};
  std::vector<std::string> faults;     // pause, kill, latency, drop, partition, skew, jump,
                                       // server-kill, minority-stall, admin-delete, many-leases,
                                       // delay-one, evict, cancel-race
  FenceMode fence = FenceMode::kFull;  // kNone: the broken variant, the register applies everything
  std::string key = "torture";         // the lock the workers contend for
  // For the fault server-kill: a program run as `PROGRAM kill PORT` to crash the server on PORT
  // and `PROGRAM start` to bring it back (scripts/servers.sh does both for its local servers).
  std::string server_control;
  // many-leases: how many long leases (other keys) each worker holds besides the contended one.
  int extra_leases = 2000;
  // How the workers take and release their locks: through the blocking calls, or through
  // acquire_async / release_async (each worker waits for the completion).
  bool async_api = false;
};

// The fault kinds run_torture() knows.
bool known_fault(const std::string& kind);

// Runs the workload against `uri` with the workers' logs and the register's socket in `dir`
// (which must exist). Calls `progress` about once a second with the fraction done. `stop` ends
// the run early (the record then covers what ran). Throws std::invalid_argument when the faults
// cannot be injected (network faults on a URI without servers to proxy, clock faults without
// libfaketime) and std::runtime_error when the register cannot listen.
RunRecord run_torture(const RunSettings& settings, const std::string& uri, const std::string& dir,
                      const std::function<void(const RunRecord&, double)>& progress,
                      std::stop_token stop);

}  // namespace fencelock::torture
