#include "torture/demo_story.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/mutex.h"

#include "fencelock/client.h"
#include "fencelock/fence.h"

namespace fencelock::torture {

namespace {

double seconds(Nanos n) { return static_cast<double>(n) / 1e9; }

}  // namespace

DemoOutcome tell_pause(const RunRecord& record, const Report& report, std::chrono::nanoseconds ttl,
                       const Say& say) {
  DemoOutcome out{.tokens = report.grants,
                  .stale_rejected = report.writes_rejected,
                  .overlaps = report.overlaps,
                  .verdict = report.verdict(),
                  .violations = report.violations,
                  .inconclusive = report.inconclusive};
  if (record.pauses.empty()) {
    say("  (no holder could be paused: the run was too short)");
    return out;
  }
  const PauseWindow& pause = record.pauses.front();
  const int p = pause.worker;
  std::uint64_t paused_token = 0;
  for (const auto& g : record.grant_log) {
    if (g.worker == p && g.at <= pause.from) paused_token = g.token;
  }
  // Where the pause caught it: after its read was admitted (inside the critical section) or
  // before (holding the lock, not yet reading). A pause can strike at any point of the loop.
  bool had_read = false;
  for (const auto& e : record.register_events) {
    if (e.worker != p || e.token != paused_token || e.at > pause.from) continue;
    if (e.kind == RegisterEvent::kEnter) had_read = e.accepted;
    if (e.kind == RegisterEvent::kWrite || e.kind == RegisterEvent::kExit) had_read = false;
  }
  say(fmt::format(
      "  worker {} holds the lock with token {}, {}, and is paused for {:.1f} s (TTL {:.1f} s)", p,
      paused_token, had_read ? "has read the register" : "has not read the register yet",
      seconds(pause.to - pause.from), seconds(ttl.count())));
  std::optional<GrantRecord> next;
  for (const auto& g : record.grant_log) {
    if (g.worker != p && g.at > pause.from && g.at < pause.to && (!next || g.at < next->at))
      next = g;
  }
  if (next) {
    out.taken_over = true;
    say(fmt::format("  worker {} is granted token {} {:.1f} s into the pause, and writes",
                    next->worker, next->token, seconds(next->at - pause.from)));
  } else {
    say("  nobody else is granted the lock during the pause: this backend keeps a paused "
        "holder's lock (PostgreSQL advisory locks live as long as the holder's session)");
  }
  for (const auto& l : record.leases) {
    if (l.lost && l.worker == p && l.token == paused_token) {
      out.lost_delay_ms = static_cast<double>(l.fired_at - l.valid_until) / 1e6;
      say(
          fmt::format("  worker {} wakes: lost() fired {:.0f} ms after its validity ended (it "
                      "was frozen); it ignores the signal and goes on",
                      p, *out.lost_delay_ms));
    }
  }
  // Its first refused read or write after the pause began, or else its first write after the
  // pause. The register may log what the worker sends on waking a moment before the
  // orchestrator notes the pause's end, so the search starts at the pause's beginning (a
  // stopped worker sends nothing; a request it sent just before the stop was admitted then).
  for (const auto& e : record.register_events) {
    if (e.worker != p || e.token != paused_token || e.at <= pause.from ||
        (e.kind != RegisterEvent::kEnter && e.kind != RegisterEvent::kWrite)) {
      continue;
    }
    const char* what = e.kind == RegisterEvent::kEnter ? "read" : "write";
    if (!e.accepted) {
      say(fmt::format("  the fence refuses its {}: rejected: stale token {} < {}", what, e.token,
                      e.highest));
      break;
    }
    if (e.kind == RegisterEvent::kWrite && e.at >= pause.to) {
      say("  its write is accepted: no newer token was issued, so it still was the holder");
      break;
    }
  }
  return out;
}

Result<DemoOutcome> memory_story(const std::string& uri, std::chrono::milliseconds ttl,
                                 const Say& say) {
  auto paused_client = Client::connect(uri);
  if (!paused_client.ok()) return paused_client.status();
  auto other_client = Client::connect(uri);
  if (!other_client.ok()) return other_client.status();
  const LockKey key = *LockKey::make("demo/register");
  FenceGate gate;
  std::uint64_t value = 0;  // the register: written only under the gate
  say(fmt::format("\n== {} (in this process: two Clients share one lock table, no server)", uri));
  // Declared before the lease: its release fires lost() (and so the callback) at the latest.
  std::optional<std::chrono::steady_clock::time_point> lost_at;
  detail::Mutex lost_mu;
  auto first = paused_client->acquire(key, {.ttl = ttl, .renew = false});
  if (!first.ok()) return first.status();
  const FencingToken stale = first->token();
  std::uint64_t read = 0;
  (void)gate.run(stale, [&] { read = value; });
  const auto paused_at = std::chrono::steady_clock::now();
  first->on_lost([&] {
    detail::MutexLock lock(lost_mu);
    lost_at = std::chrono::steady_clock::now();
  });
  say(fmt::format(
      "  worker 1 holds the lock with token {}, has read the register, and is paused (TTL "
      "{:.1f} s; a paused process renews nothing)",
      stale.value(), std::chrono::duration<double>(ttl).count()));
  auto second = other_client->acquire(key, {.ttl = ttl, .wait = 10 * ttl});
  if (!second.ok()) return second.status();
  const auto granted_at = std::chrono::steady_clock::now();
  const FencingToken fresh = second->token();
  const Status fresh_write = gate.run(fresh, [&] { value = read + 1; });
  say(fmt::format("  worker 2 is granted token {} {:.1f} s into the pause, and writes ({})",
                  fresh.value(), std::chrono::duration<double>(granted_at - paused_at).count(),
                  fresh_write.ok() ? "accepted" : fresh_write.to_string()));
  std::optional<double> lost_delay_ms;
  {
    detail::MutexLock lock(lost_mu);
    if (lost_at) {
      lost_delay_ms =
          std::chrono::duration<double, std::milli>(*lost_at - first->valid_until()).count();
    }
  }
  // In one process lost() fires on time (never after valid_until()); a frozen process sees it
  // only when it wakes, as the runs on real servers show.
  say(lost_delay_ms
          ? fmt::format("  worker 1 wakes: lost() fired {:.0f} ms {} its validity ended; it "
                        "ignores the signal and writes anyway",
                        std::abs(*lost_delay_ms), *lost_delay_ms < 0 ? "before" : "after")
          : std::string("  worker 1 wakes: lost() has NOT fired; it writes"));
  const Status stale_write = gate.run(stale, [&] { value = read + 1; });
  say(stale_write.ok() ? std::string("  its write is ACCEPTED")
                       : "  the fence refuses its write: " + stale_write.message());
  DemoOutcome out{.tokens = 2,  // two grants
                  .stale_rejected = stale_write.ok() ? 0U : 1U,
                  // worker 2 granted while worker 1's lease was still valid
                  .overlaps = granted_at < first->valid_until() ? 1U : 0U,
                  .lost_delay_ms = lost_delay_ms,
                  .taken_over = fresh > stale};
  if (!(fresh > stale)) out.violations.emplace_back("worker 2's token is not above worker 1's");
  if (!fresh_write.ok()) out.violations.emplace_back("the fence refused the holder's write");
  if (stale_write.code() != Code::kFenced)
    out.violations.emplace_back("the stale write was applied");
  if (value != 1) out.violations.emplace_back(fmt::format("the register holds {}, not 1", value));
  if (!lost_delay_ms) out.violations.emplace_back("lost() never fired for the ended lease");
  if (out.overlaps > 0) out.violations.emplace_back("the two grants overlapped");
  out.verdict = out.violations.empty() ? Verdict::kSafe : Verdict::kUnsafe;
  return out;
}

}  // namespace fencelock::torture
