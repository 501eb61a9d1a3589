// Hand-made torture histories for the checker's unit tests: a RunRecord built event by event as
// the register and the workers record them (register clock for events, worker clock for lease
// reports; both the same CLOCK_MONOTONIC for an unfaked worker).
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include "torture/checker.h"

namespace fencelock::torture {

constexpr Nanos kMs = 1'000'000;
constexpr Nanos kS = 1000 * kMs;

// Builds a RunRecord event by event. Worker w runs as process 100 + w unless given a pid.
class History {
 public:
  long pid_of(int worker) const { return 100 + worker; }

  History& hello(int worker, Nanos at, long pid = 0, Nanos steady = -1, Nanos wall_offset = 0) {
    RegisterEvent e = event(RegisterEvent::kHello, worker, 0, at, pid);
    e.worker_steady = steady < 0 ? at : steady;
    e.wall = 1'700'000'000 * kS + at;
    e.worker_wall = e.wall + wall_offset;
    r.register_events.push_back(e);
    return *this;
  }
  History& acquire(int worker, Nanos at, long pid = 0, Nanos steady = -1, Nanos wall_offset = 0) {
    RegisterEvent e = event(RegisterEvent::kAcquire, worker, 0, at, pid);
    e.worker_steady = steady < 0 ? at : steady;
    e.wall = 1'700'000'000 * kS + at;
    e.worker_wall = e.wall + wall_offset;
    r.register_events.push_back(e);
    return *this;
  }
  History& grant(int worker, std::uint64_t token, Nanos at, long pid = 0) {
    r.register_events.push_back(event(RegisterEvent::kGrant, worker, token, at, pid));
    r.grant_log = grants_of(r.register_events);
    return *this;
  }
  History& enter(int worker, std::uint64_t token, Nanos at, bool accepted = true, long pid = 0) {
    RegisterEvent e = event(RegisterEvent::kEnter, worker, token, at, pid);
    e.accepted = accepted;
    r.register_events.push_back(e);
    return *this;
  }
  History& write(int worker, std::uint64_t token, std::uint64_t value, Nanos at,
                 bool accepted = true, long pid = 0) {
    RegisterEvent e = event(RegisterEvent::kWrite, worker, token, at, pid);
    e.value = value;
    e.accepted = accepted;
    r.register_events.push_back(e);
    if (accepted) r.final_value = value;
    return *this;
  }
  History& exit(int worker, std::uint64_t token, Nanos at, long pid = 0) {
    r.register_events.push_back(event(RegisterEvent::kExit, worker, token, at, pid));
    return *this;
  }
  // The worker's connection closed (it was killed).
  History& leave(int worker, Nanos at, long pid = 0) {
    r.register_events.push_back(event(RegisterEvent::kLeave, worker, 0, at, pid));
    return *this;
  }
  // The worker's report of one lease (worker clock).
  History& lease(int worker, std::uint64_t token, Nanos valid_until, Nanos observed_at,
                 bool lost = false, Nanos fired_at = 0, bool callback_ran = true, long pid = 0) {
    r.leases.push_back({worker, pid == 0 ? pid_of(worker) : pid, token, 0, valid_until, lost,
                        callback_ran, fired_at, observed_at});
    return *this;
  }
  // A whole clean cycle of worker w: acquire, grant, read, write value, exit, and a lease report
  // with validity well past it. Takes 10 ms from `at`.
  History& cycle(int worker, std::uint64_t token, std::uint64_t value, Nanos at) {
    acquire(worker, at).grant(worker, token, at + 1 * kMs).enter(worker, token, at + 2 * kMs);
    write(worker, token, value, at + 4 * kMs).exit(worker, token, at + 6 * kMs);
    return lease(worker, token, at + 2 * kS, at + 7 * kMs);
  }
  // `n` clean cycles of worker 0 starting at `at`, tokens and values going on from the given ones.
  History& cycles(int n, std::uint64_t first_token, std::uint64_t first_value, Nanos at) {
    for (int i = 0; i < n; ++i)
      cycle(0, first_token + i, first_value + i, at + Nanos{i} * 10 * kMs);
    return *this;
  }
  History& fault(InjectedFault f) {
    r.faults.push_back(std::move(f));
    return *this;
  }

  RunRecord r;

 private:
  RegisterEvent event(RegisterEvent::Kind kind, int worker, std::uint64_t token, Nanos at,
                      long pid) const {
    RegisterEvent e;
    e.kind = kind;
    e.worker = worker;
    e.pid = pid == 0 ? pid_of(worker) : pid;
    e.token = token;
    e.at = at;
    return e;
  }
};

inline CheckOptions options(FenceMode fence = FenceMode::kFull) {
  CheckOptions o;
  o.ttl = std::chrono::seconds(2);
  o.duration = std::chrono::seconds(1);  // floors: 3 grants, 3 writes
  o.fence = fence;
  return o;
}

inline InjectedFault fault(std::string kind, Nanos at, Nanos healed_at, bool took_effect = true,
                           int worker = -1, long pid = 0) {
  InjectedFault f;
  f.kind = std::move(kind);
  f.at = at;
  f.healed_at = healed_at;
  f.took_effect = took_effect;
  f.worker = worker;
  f.pid = pid;
  return f;
}

}  // namespace fencelock::torture
