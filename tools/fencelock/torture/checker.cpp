#include "torture/checker.h"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "torture/faults.h"

namespace fencelock::torture {

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kSafe:
      return "SAFE";
    case Verdict::kUnsafe:
      return "UNSAFE";
    case Verdict::kInconclusive:
      return "INCONCLUSIVE";
  }
  return "INCONCLUSIVE";
}

namespace {

constexpr std::size_t kMaxDetails = 20;
constexpr Nanos kMs = 1'000'000;

double ms(Nanos n) { return static_cast<double>(n) / 1e6; }

class Checker {
 public:
  Checker(const RunRecord& record, const CheckOptions& options)
      : record_(record),
        options_(options),
        margin_(options.ttl.count()),
        allowance_(options.lost_allowance.count()) {
    for (const LeaseReport& lease : record.leases) leases_[{lease.pid, lease.token}] = &lease;
    for (const InjectedFault& f : record.faults) {
      if (is_fault(f.kind, Fault::kSkew) && f.pid != 0) skewed_.insert(f.pid);
    }
  }

  Report run() {
    report_.operations = 0;
    report_.grants = record_.grant_log.size();
    report_.faults = record_.faults.size();
    replay_register();
    check_tokens();
    check_leases();
    check_deletions();
    check_faults();
    check_floors();
    if (!record_.left_held.empty()) {
      report_.left_held++;
      violation("lock held by nobody: " + record_.left_held);
    }
    for (const std::string& failure : record_.control_failures) {
      report_.inconclusive.push_back("the server-control program failed: " + failure);
    }
    return report_;
  }

 private:
  void violation(std::string text) {
    if (report_.violations.size() < kMaxDetails) report_.violations.push_back(std::move(text));
  }

  bool skewed(long pid) const { return skewed_.count(pid) > 0; }

  bool paused_between(int worker, Nanos from, Nanos to) const {
    return std::any_of(record_.pauses.begin(), record_.pauses.end(), [&](const PauseWindow& p) {
      return p.worker == worker && p.from <= to && p.to >= from;
    });
  }

  // PostgreSQL advisory locks only (a lock freed the moment its holder's session ends): whether
  // a fault that took effect ended the session of the holder in process `pid`, whose report is
  // `lease` (nullptr: none), at `t` or up to one TTL before. Its process was killed (SIGKILL:
  // it wrote no report); or a fault cut every session (drop resets every proxied connection,
  // partition freezes them and a holder whose health check fails closes its session, server-kill
  // and failover end the server's sessions) and the holder was told (its report says lost) or left
  // no report.
  bool session_ended(long pid, const LeaseReport* lease, Nanos t) const {
    return std::any_of(record_.faults.begin(), record_.faults.end(), [&](const InjectedFault& f) {
      if (!f.took_effect || t < f.at || t > f.healed_at + margin_) return false;
      if (is_fault(f.kind, Fault::kKill)) return f.pid == pid && lease == nullptr;
      const FaultSpec* spec = find_fault(f.kind);
      const bool cuts_every_session = spec != nullptr && spec->cuts_every_session;
      return cuts_every_session && (lease == nullptr || lease->lost);
    });
  }

  // How long after an admin-delete its holder may go on believing in its lease: a renewal period
  // and its round trip.
  Nanos learn_bound() const { return margin_ / 3 + std::max(margin_ / 10, 200 * kMs); }

  // When an admin-delete was over (its control program returned; `at` in older records).
  static Nanos done(const InjectedFault& f) { return std::max(f.at, f.done_at); }

  // Whether `lease` was taken away by an admin-delete that began before `t` (granted before the
  // delete was over) and its holder learned of it in time, or let go of it in time (released it,
  // its report written, before the learning bound: what check_deletions() accepts too).
  bool deleted_and_told(const LeaseReport& lease, Nanos t) const {
    return std::any_of(record_.faults.begin(), record_.faults.end(), [&](const InjectedFault& f) {
      if (!is_fault(f.kind, Fault::kAdminDelete) || lease.granted_at > done(f) || f.at > t)
        return false;
      const Nanos bound = done(f) + learn_bound();
      const bool told = lease.lost && lease.fired_at != 0 && lease.fired_at <= bound;
      const bool let_go = !lease.lost && lease.observed_at != 0 && lease.observed_at <= bound;
      return told || let_go;
    });
  }

  const LeaseReport* lease_of(long pid, std::uint64_t token) const {
    auto it = leases_.find({pid, token});
    return it == leases_.end() ? nullptr : it->second;
  }

  struct Holder {
    int worker = 0;
    std::uint64_t token = 0;
  };

  // B (`entering`) began its critical section while `older` (process `pid`) was inside. Mutual
  // exclusion failed only if both leases were valid then, by their holders' own accounts (a
  // validity never comes back once passed, so the final valid_until() decides).
  enum class OverlapKind { kAfterExpiry, kExcused, kViolation };
  OverlapKind classify(long pid, const Holder& older, const RegisterEvent& entering) const {
    if (skewed(pid) || skewed(entering.pid)) return OverlapKind::kExcused;
    const LeaseReport* a = lease_of(pid, older.token);
    const LeaseReport* b = lease_of(entering.pid, entering.token);
    const Nanos t = entering.at;
    if ((a != nullptr && a->valid_until <= t) || (b != nullptr && b->valid_until <= t)) {
      return OverlapKind::kAfterExpiry;
    }
    if (a != nullptr && deleted_and_told(*a, t)) return OverlapKind::kExcused;
    // Redis, Redlock, PostgreSQL lease mode and etcd keep a lock until it expires, whatever
    // happens to its holder's process or connection: no kill or dropped connection explains a
    // second grant, and a holder that left no report (a killed worker) is no excuse. Only a
    // report can show that a validity had passed (above).
    if (options_.validity_bound) return OverlapKind::kViolation;
    // A PostgreSQL advisory lock is freed the moment its holder's session ends, so a fault that
    // ended the older holder's session explains the newer grant; a fault that hit another
    // worker, or that took no effect, explains nothing.
    if (session_ended(pid, a, t)) return OverlapKind::kExcused;
    return OverlapKind::kViolation;
  }

  void overlap(const std::map<long, Holder>& inside, const RegisterEvent& e) {
    bool any = false;
    OverlapKind worst = OverlapKind::kAfterExpiry;
    for (const auto& [pid, holder] : inside) {
      if (pid == e.pid) continue;
      any = true;
      OverlapKind kind = classify(pid, holder, e);
      if (kind == OverlapKind::kViolation) {
        const LeaseReport* lease = lease_of(pid, holder.token);
        violation(
            lease == nullptr
                ? fmt::format("mutual exclusion: worker {} (token {}) entered while worker {} "
                              "(token {}) was inside, which left no lease report, and {}",
                              e.worker, e.token, holder.worker, holder.token,
                              options_.validity_bound
                                  ? "this backend frees a held lock only when it expires"
                                  : "no fault that took effect had ended its session")
                : fmt::format("mutual exclusion: worker {} (token {}) entered while worker {} "
                              "(token {}) was inside with {:.1f} ms of validity left",
                              e.worker, e.token, holder.worker, holder.token,
                              ms(lease->valid_until - e.at)));
      }
      worst = std::max(worst, kind);
    }
    if (!any) return;
    report_.overlaps++;
    if (worst == OverlapKind::kViolation) report_.exclusion_violations++;
    if (worst == OverlapKind::kExcused) report_.overlaps_excused++;
    if (worst == OverlapKind::kAfterExpiry) report_.overlaps_after_expiry++;
  }

  // The register's log in order: overlaps, refusals, applied writes and their token order.
  void replay_register() {
    std::map<long, Holder> inside;  // by process
    std::uint64_t highest = 0;      // the highest token the fence had admitted (per its rule)
    for (const RegisterEvent& e : record_.register_events) {
      switch (e.kind) {
        case RegisterEvent::kEnter:
          report_.operations++;
          overlap(inside, e);
          inside[e.pid] = {e.worker, e.token};
          if (!e.accepted) report_.writes_rejected++;
          if (e.accepted && options_.fence == FenceMode::kFull)
            highest = std::max(highest, e.token);
          break;
        case RegisterEvent::kWrite:
          report_.operations++;
          if (!e.accepted) {
            report_.writes_rejected++;
            break;
          }
          report_.writes_applied++;
          if (e.token < highest) {
            report_.fenced_violations++;
            violation(
                fmt::format("fence: worker {} wrote {} with token {} after token {} was "
                            "admitted",
                            e.worker, e.value, e.token, highest));
          }
          highest = std::max(highest, e.token);
          break;
        case RegisterEvent::kExit:
          report_.operations++;
          inside.erase(e.pid);
          break;
        case RegisterEvent::kLeave:
          inside.erase(e.pid);
          break;
        default:
          break;
      }
    }
    // Every applied write is an increment (read + 1): the final value must count all of them.
    if (report_.writes_applied > record_.final_value) {
      report_.lost_updates = report_.writes_applied - record_.final_value;
      violation(fmt::format("lost updates: {} increments applied, final value {}",
                            report_.writes_applied, record_.final_value));
    }
    unavailability();
  }

  // Strictly increasing across successive grants: against every grant that completed before
  // this one began (register clock), and never the same token twice.
  void check_tokens() {
    std::map<std::uint64_t, const GrantRecord*> seen;
    for (const GrantRecord& g : record_.grant_log) {
      auto [it, fresh] = seen.emplace(g.token, &g);
      if (!fresh) {
        report_.token_violations++;
        violation(fmt::format("token {} granted twice (workers {} and {})", g.token,
                              it->second->worker, g.worker));
      }
    }
    std::vector<const GrantRecord*> by_start;
    for (const GrantRecord& g : record_.grant_log) by_start.push_back(&g);
    std::sort(by_start.begin(), by_start.end(),
              [](const GrantRecord* a, const GrantRecord* b) { return a->asked_at < b->asked_at; });
    std::vector<const GrantRecord*> by_end = by_start;
    std::sort(by_end.begin(), by_end.end(),
              [](const GrantRecord* a, const GrantRecord* b) { return a->at < b->at; });
    std::size_t done = 0;
    const GrantRecord* newest = nullptr;  // the completed grant with the highest token
    for (const GrantRecord* g : by_start) {
      for (; done < by_end.size() && by_end[done]->at < g->asked_at; ++done) {
        if (newest == nullptr || by_end[done]->token > newest->token) newest = by_end[done];
      }
      if (newest != nullptr && g->token < newest->token) {
        report_.token_violations++;
        violation(
            fmt::format("token regression: worker {} was granted {} after worker {} had "
                        "been granted {}",
                        g->worker, g->token, newest->worker, newest->token));
      }
    }
  }

  void check_leases() {
    for (const LeaseReport& lease : record_.leases) {
      if (skewed(lease.pid)) continue;  // its clock, and so its account, is fake
      if (!lease.lost) {
        if (lease.observed_at > lease.valid_until + allowance_ &&
            !paused_between(lease.worker, lease.valid_until, lease.observed_at)) {
          report_.unsignalled_expiries++;
          violation(
              fmt::format("worker {} (token {}): validity passed {:.1f} ms before it looked, "
                          "without lost()",
                          lease.worker, lease.token, ms(lease.observed_at - lease.valid_until)));
        }
        continue;
      }
      report_.lost_signals++;
      // A report of a loss without the callback's time is a callback that never ran.
      const bool callback_ran = lease.callback_ran && lease.fired_at != 0;
      const Nanos fired_at = lease.fired_at != 0 ? lease.fired_at : lease.observed_at;
      const Nanos late = fired_at - lease.valid_until;
      const Nanos from =
          callback_ran ? lease.valid_until : std::min(lease.valid_until, fired_at) - 200 * kMs;
      if (paused_between(lease.worker, from, fired_at)) continue;
      if (!callback_ran) {
        report_.late_lost++;
        violation(
            fmt::format("worker {} (token {}): lost() fired but its callback had not run "
                        "100 ms later",
                        lease.worker, lease.token));
        continue;
      }
      if (late <= 0) continue;
      report_.max_lost_delay = std::max(report_.max_lost_delay, late);
      if (late > allowance_) {
        report_.late_lost++;
        violation(fmt::format("worker {} (token {}): lost() fired {:.1f} ms after valid_until()",
                              lease.worker, lease.token, ms(late)));
      }
    }
  }

  // Every lease that an admin-delete took away (granted before it, still looked at after the
  // learning bound) must have been told lost() within the bound.
  void check_deletions() {
    for (const InjectedFault& f : record_.faults) {
      // Only a delete known to have taken the lock: one that did nothing is no fault at all.
      if (!is_fault(f.kind, Fault::kAdminDelete) || !f.took_effect || !deleted_under_holder(f))
        continue;
      const Nanos bound = done(f) + learn_bound();
      for (const LeaseReport& lease : record_.leases) {
        // Only a lease held when the delete began is certainly hit; one granted while it ran
        // may be a new holder's (excused in overlaps if it learned, not required to).
        if (lease.granted_at > f.at || lease.observed_at <= bound) continue;
        if (lease.lost && lease.fired_at != 0 && lease.fired_at <= bound) continue;
        if (paused_between(lease.worker, f.at, bound)) continue;
        report_.deletions_unnoticed++;
        violation(lease.lost
                      ? fmt::format("admin-delete: worker {} (token {}) learned of it "
                                    "{:.1f} ms later (bound {:.1f} ms)",
                                    lease.worker, lease.token, ms(lease.fired_at - done(f)),
                                    ms(learn_bound()))
                      : fmt::format("admin-delete: worker {} (token {}) never learned of "
                                    "it ({:.1f} ms later it still held its lease)",
                                    lease.worker, lease.token, ms(lease.observed_at - f.at)));
      }
    }
  }

  // What the logs show of a fault's effect, on top of what the orchestrator saw.
  std::string missing_evidence(const InjectedFault& f) const {
    const Nanos until = f.healed_at + margin_;
    const auto& events = record_.register_events;
    if (is_fault(f.kind, Fault::kPause)) {
      if (!f.took_effect) return not_taken(f);
      const bool lost =
          std::any_of(record_.leases.begin(), record_.leases.end(), [&](const LeaseReport& l) {
            return l.pid == f.pid && l.lost && l.observed_at >= f.at && l.observed_at <= until;
          });
      const bool refused = std::any_of(events.begin(), events.end(), [&](const RegisterEvent& e) {
        return e.pid == f.pid &&
               (e.kind == RegisterEvent::kEnter || e.kind == RegisterEvent::kWrite) &&
               !e.accepted && e.at >= f.at && e.at <= until;
      });
      return lost || refused ? "" : "the paused worker neither lost its lease nor was refused";
    }
    if (is_fault(f.kind, Fault::kKill)) {
      if (!f.took_effect) return not_taken(f);
      const bool restarted = std::any_of(events.begin(), events.end(), [&](const RegisterEvent& e) {
        return e.kind == RegisterEvent::kHello && e.worker == f.worker && e.pid != f.pid &&
               e.at >= f.at;
      });
      return restarted ? "" : "no new worker started after the kill";
    }
    if (is_fault(f.kind, Fault::kSkew) || is_fault(f.kind, Fault::kJump)) {
      const RegisterEvent* hello = nullptr;
      for (const RegisterEvent& e : events) {
        if (e.pid != f.pid) continue;
        if (e.kind == RegisterEvent::kHello) hello = &e;
        if (e.kind == RegisterEvent::kLeave || e.at < f.at || e.at > f.healed_at) continue;
        if (is_fault(f.kind, Fault::kJump) && e.worker_wall - e.wall <= -20'000 * kMs) return "";
        if (is_fault(f.kind, Fault::kSkew) && hello != nullptr && e.at - hello->at >= 200 * kMs &&
            2 * (e.worker_steady - hello->worker_steady) < e.at - hello->at) {
          return "";
        }
      }
      return is_fault(f.kind, Fault::kJump) ? "the worker's wall clock was never seen behind"
                                            : "the worker's clock was never seen running slow";
    }
    if (is_fault(f.kind, Fault::kAdminDelete)) {
      if (!f.took_effect) return not_taken(f);
      if (f.pid == 0) return "no worker was inside its critical section when it began";
      return deleted_under_holder(f) ? ""
                                     : "no holder inside was seen losing the lock: it was not "
                                       "told, not overtaken, and still held it when inspected";
    }
    if (is_fault(f.kind, Fault::kMinorityStall) || is_fault(f.kind, Fault::kServerKill) ||
        is_fault(f.kind, Fault::kFailover)) {
      if (!f.took_effect) return not_taken(f);
      // What the server itself showed: a control program's exit status proves nothing.
      const bool stall = is_fault(f.kind, Fault::kMinorityStall),
                 kill = is_fault(f.kind, Fault::kServerKill);
      const ProbeResult during = stall ? ProbeResult::kSilent : ProbeResult::kRefused;
      if (f.probe_during != during) {
        return fmt::format("{} ({})",
                           stall  ? "the paused server did not stay silent to a probe after the "
                                    "pause"
                           : kill ? "the killed server did not refuse connections after the kill"
                                  : "the old primary did not refuse connections after the "
                                    "failover",
                           probe_result_name(f.probe_during));
      }
      if (f.probe_after != ProbeResult::kAnswered) {
        return fmt::format("{} ({})",
                           stall  ? "the paused server did not answer a probe after the resume"
                           : kill ? "the killed server did not answer a probe after the restart"
                                  : "the standby did not answer a probe after the failover",
                           probe_result_name(f.probe_after));
      }
      return "";
    }
    if (is_fault(f.kind, Fault::kEvict)) {
      if (!f.took_effect) return not_taken(f);
      const bool evicted = f.evicted_before >= 0 && f.evicted_after > f.evicted_before;
      if (evicted || f.filled_up) return "";
      return f.evicted_before < 0
                 ? "no server's INFO could be read (" + f.note + ")"
                 : "no key was evicted and the fill took no server past its maxmemory";
    }
    return f.took_effect ? "" : not_taken(f);
  }

  // Why a fault the orchestrator saw fail did not take effect (never "": that would count it).
  static std::string not_taken(const InjectedFault& f) {
    return f.note.empty() ? "no effect was seen" : f.note;
  }

  // admin-delete: the delete took the lock from the holder it hit (process f.pid, inside its
  // critical section with token T when the delete began), as any of these shows: that holder's
  // lease, granted before the delete, fired lost() after it began; another process was granted
  // the lock after the delete began while the hit holder was still inside (before its next EXIT,
  // or its connection closing); or the lock, held under T just before the delete, was free or
  // another's when inspected just after it, the hit holder still inside.
  bool deleted_under_holder(const InjectedFault& f) const {
    if (f.pid == 0) return false;
    const Nanos until = f.healed_at + margin_;
    const bool told =
        std::any_of(record_.leases.begin(), record_.leases.end(), [&](const LeaseReport& l) {
          return l.pid == f.pid && l.granted_at <= f.at && l.lost && l.fired_at >= f.at &&
                 l.fired_at <= until;
        });
    if (told) return true;
    std::uint64_t token = 0;  // the hit holder's, if it was inside when the delete began
    Nanos left_at = 0;        // when it left after the delete began (0: not seen)
    bool overtaken = false;
    for (const RegisterEvent& e : record_.register_events) {
      const bool leaves = e.kind == RegisterEvent::kExit || e.kind == RegisterEvent::kLeave;
      if (e.pid == f.pid && e.at <= f.at) {
        if (e.kind == RegisterEvent::kEnter) token = e.token;
        if (leaves) token = 0;
        continue;
      }
      if (e.at < f.at) continue;
      if (e.pid == f.pid && leaves) {
        left_at = e.at;
        break;
      }
      overtaken |= e.kind == RegisterEvent::kGrant;  // another process, the holder inside
    }
    if (token == 0) return false;
    if (overtaken) return true;
    const bool still_inside = left_at == 0 || left_at > f.inspected_at;
    const bool moved = f.holder_after != f.holder_before || f.token_after != f.token_before;
    return f.inspected_at != 0 && f.token_before == token && moved && still_inside;
  }

  void check_faults() {
    std::map<std::string, std::string> why_not;  // by kind: the last reason
    for (const InjectedFault& f : record_.faults) {
      Report::PerFault& kind = report_.by_fault[f.kind];
      kind.count++;
      const std::string missing = missing_evidence(f);
      if (missing.empty()) {
        kind.effective++;
      } else {
        why_not[f.kind] = missing;
      }
    }
    for (const std::string& kind : options_.requested_faults) {
      auto it = report_.by_fault.find(kind);
      if (it == report_.by_fault.end() || it->second.count == 0) {
        report_.inconclusive.push_back(
            fmt::format("no {} fault was injected (is the run long enough?)", kind));
      } else if (it->second.effective == 0) {
        report_.inconclusive.push_back(fmt::format("none of the {} {} faults took effect ({})",
                                                   it->second.count, kind, why_not[kind]));
      }
    }
  }

  void check_floors() {
    const std::uint64_t floor = std::max<std::uint64_t>(
        3, static_cast<std::uint64_t>(options_.duration.count() / (4 * options_.ttl.count())));
    if (report_.grants < floor) {
      report_.inconclusive.push_back(
          fmt::format("only {} grants (at least {} needed): is the key held by someone else?",
                      report_.grants, floor));
    }
    if (report_.writes_applied < floor) {
      report_.inconclusive.push_back(fmt::format("only {} writes applied (at least {} needed)",
                                                 report_.writes_applied, floor));
    }
  }

  // Per fault: from its heal to the next admitted critical section.
  void unavailability() {
    for (const InjectedFault& f : record_.faults) {
      Nanos next = record_.ended_at;
      for (const RegisterEvent& e : record_.register_events) {
        if (e.kind == RegisterEvent::kEnter && e.accepted && e.at >= f.healed_at) {
          next = e.at;
          break;
        }
      }
      report_.max_unavailable = std::max(report_.max_unavailable, next - f.healed_at);
      Report::PerFault& kind = report_.by_fault[f.kind];
      kind.max_unavailable = std::max(kind.max_unavailable, next - f.healed_at);
    }
  }

  const RunRecord& record_;
  const CheckOptions& options_;
  const Nanos margin_;
  const Nanos allowance_;
  std::map<std::pair<long, std::uint64_t>, const LeaseReport*> leases_;
  std::set<long> skewed_;
  Report report_;
};

}  // namespace

Report check(const RunRecord& record, const CheckOptions& options) {
  return Checker(record, options).run();
}

}  // namespace fencelock::torture
