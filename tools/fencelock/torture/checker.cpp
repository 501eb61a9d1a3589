#include "torture/checker.h"

#include <algorithm>

namespace fencelock::torture {

namespace {

bool paused_between(const RunRecord& record, int worker, Nanos from, Nanos to) {
  return std::any_of(record.pauses.begin(), record.pauses.end(), [&](const PauseWindow& p) {
    return p.worker == worker && p.from <= to && p.to >= from;
  });
}

}  // namespace

Report check(const RunRecord& record, std::chrono::nanoseconds lost_allowance) {
  Report report;
  report.operations = record.register_events.size();
  report.grants = record.grant_log.size();
  report.faults = record.faults.size();
  std::uint64_t highest_applied = 0;
  for (const RegisterEvent& e : record.register_events) {
    if (e.kind == RegisterEvent::kEnter) {
      if (e.overlapped) report.overlaps++;
      if (!e.accepted) report.writes_rejected++;
    } else if (e.kind == RegisterEvent::kWrite) {
      if (!e.accepted) {
        report.writes_rejected++;
        continue;
      }
      report.writes_applied++;
      if (e.token < highest_applied) report.fenced_violations++;
      highest_applied = std::max(highest_applied, e.token);
    }
  }
  // Every applied write is an increment (read + 1): the final value must count all of them.
  if (report.writes_applied > record.final_value)
    report.lost_updates = report.writes_applied - record.final_value;

  for (const LostSignal& s : record.lost) {
    report.lost_signals++;
    const Nanos late = s.fired_at - s.valid_until;
    if (late <= 0 || paused_between(record, s.worker, s.granted_at, s.fired_at)) continue;
    report.max_lost_delay = std::max(report.max_lost_delay, late);
    if (late > lost_allowance.count()) report.late_lost++;
  }

  for (const InjectedFault& f : record.faults) {
    Nanos next = record.ended_at;
    for (const RegisterEvent& e : record.register_events) {
      if (e.kind == RegisterEvent::kEnter && e.accepted && e.at >= f.healed_at) {
        next = e.at;
        break;
      }
    }
    report.max_unavailable = std::max(report.max_unavailable, next - f.healed_at);
    Report::PerFault& kind = report.by_fault[f.kind];
    kind.count++;
    kind.max_unavailable = std::max(kind.max_unavailable, next - f.healed_at);
  }
  return report;
}

}  // namespace fencelock::torture
