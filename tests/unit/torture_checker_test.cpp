// The torture checker (tools/fencelock/torture/checker.h) on hand-made histories: each verdict
// must be able to fail.
#include <gtest/gtest.h>

#include <chrono>

#include "torture/checker.h"

namespace fencelock::torture {
namespace {

using namespace std::chrono_literals;

constexpr Nanos kMs = 1'000'000;

RegisterEvent enter(int worker, std::uint64_t token, Nanos at, bool accepted = true,
                    bool overlapped = false) {
  RegisterEvent e;
  e.kind = RegisterEvent::kEnter;
  e.worker = worker, e.token = token, e.at = at, e.accepted = accepted, e.overlapped = overlapped;
  return e;
}

RegisterEvent write(int worker, std::uint64_t token, std::uint64_t value, Nanos at,
                    bool accepted = true) {
  RegisterEvent e;
  e.kind = RegisterEvent::kWrite;
  e.worker = worker, e.token = token, e.value = value, e.at = at, e.accepted = accepted;
  return e;
}

TEST(TortureChecker, AFencedHistoryWithARejectedStaleWriteIsSafe) {
  RunRecord r;
  r.register_events = {enter(0, 5, 1 * kMs),  write(0, 5, 1, 2 * kMs),
                       enter(1, 6, 3 * kMs, true, /*overlapped=*/true),
                       write(1, 6, 2, 4 * kMs), write(0, 5, 2, 5 * kMs, /*accepted=*/false)};
  r.final_value = 2;
  r.grant_log = {{.worker = 0, .token = 5, .at = 0}, {.worker = 1, .token = 6, .at = 2 * kMs}};
  Report report = check(r, 25ms);
  EXPECT_TRUE(report.safe());
  EXPECT_EQ(report.grants, 2u);
  EXPECT_EQ(report.writes_applied, 2u);
  EXPECT_EQ(report.writes_rejected, 1u);
  EXPECT_EQ(report.overlaps, 1u);
  EXPECT_EQ(report.fenced_violations, 0u);
  EXPECT_EQ(report.lost_updates, 0u);
}

TEST(TortureChecker, AnOlderTokenAppliedAfterANewerOneIsAFencedViolationAndALostUpdate) {
  RunRecord r;
  // Without a fence: worker 0 (token 5) read 0, paused; worker 1 (token 6) read 0 and wrote 1;
  // worker 0 woke and wrote 1 as well. Two increments, final value 1.
  r.register_events = {enter(0, 5, 1 * kMs), enter(1, 6, 2 * kMs, true, true),
                       write(1, 6, 1, 3 * kMs), write(0, 5, 1, 4 * kMs)};
  r.final_value = 1;
  Report report = check(r, 25ms);
  EXPECT_FALSE(report.safe());
  EXPECT_EQ(report.fenced_violations, 1u);
  EXPECT_EQ(report.lost_updates, 1u);
}

TEST(TortureChecker, ALateLostSignalCountsUnlessTheWorkerWasPausedDuringThatLease) {
  RunRecord r;
  r.lost = {{.worker = 0, .token = 5, .granted_at = 0, .fired_at = 1100 * kMs,
             .valid_until = 1000 * kMs},
            {.worker = 1, .token = 6, .granted_at = 0, .fired_at = 3000 * kMs,
             .valid_until = 1000 * kMs},
            {.worker = 2, .token = 7, .granted_at = 0, .fired_at = 1010 * kMs,
             .valid_until = 1000 * kMs}};
  r.pauses = {{.worker = 1, .from = 500 * kMs, .to = 2900 * kMs}};
  Report report = check(r, 25ms);
  EXPECT_EQ(report.lost_signals, 3u);
  EXPECT_EQ(report.late_lost, 1u);  // worker 0: 100 ms late and never paused
  EXPECT_EQ(report.max_lost_delay, 100 * kMs);
  EXPECT_FALSE(report.safe());
}

TEST(TortureChecker, UnavailabilityIsMeasuredFromEachHealToTheNextAdmittedCriticalSection) {
  RunRecord r;
  r.register_events = {enter(0, 5, 100 * kMs), enter(1, 6, 900 * kMs, /*accepted=*/false),
                       enter(1, 7, 1500 * kMs)};
  r.faults = {{.kind = "drop", .at = 0, .healed_at = 200 * kMs},
              {.kind = "pause", .at = 1000 * kMs, .healed_at = 1400 * kMs}};
  r.ended_at = 2000 * kMs;
  Report report = check(r, 25ms);
  EXPECT_EQ(report.faults, 2u);
  EXPECT_EQ(report.by_fault["drop"].max_unavailable, 1300 * kMs);  // the refused enter does not count
  EXPECT_EQ(report.by_fault["pause"].max_unavailable, 100 * kMs);
  EXPECT_EQ(report.max_unavailable, 1300 * kMs);
}

}  // namespace
}  // namespace fencelock::torture
