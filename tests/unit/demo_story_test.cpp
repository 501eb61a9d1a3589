// The stories of `fencelock demo` (tools/fencelock/torture/demo_story.h): the narration of a
// torture run's pause, line by line, on hand-made records; and the in-process story on memory://,
// whose lost() callback runs on the library's thread (this test also runs under TSan).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "torture/demo_story.h"

namespace fencelock::torture {
namespace {

using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr Nanos kMs = 1'000'000;

// A record of two workers: worker 0 is granted token 1 at 10 ms and paused over [from, to].
class Story {
 public:
  Story(Nanos from, Nanos to) {
    r.pauses.push_back({0, from, to});
    grant(0, 1, 10 * kMs);
  }
  Story& grant(int worker, std::uint64_t token, Nanos at) {
    add(RegisterEvent::kGrant, worker, token, at, true, 0);
    r.grant_log = grants_of(r.register_events);
    return *this;
  }
  Story& enter(int worker, std::uint64_t token, Nanos at, bool accepted, std::uint64_t highest) {
    return add(RegisterEvent::kEnter, worker, token, at, accepted, highest);
  }
  Story& write(int worker, std::uint64_t token, Nanos at, bool accepted, std::uint64_t highest) {
    return add(RegisterEvent::kWrite, worker, token, at, accepted, highest);
  }
  // Narrates with an empty report; returns the lines said.
  std::vector<std::string> tell() {
    std::vector<std::string> lines;
    outcome = tell_pause(r, Report{}, 2s, [&](const std::string& line) { lines.push_back(line); });
    return lines;
  }

  RunRecord r;
  DemoOutcome outcome;

 private:
  Story& add(RegisterEvent::Kind kind, int worker, std::uint64_t token, Nanos at, bool accepted,
             std::uint64_t highest) {
    RegisterEvent e;
    e.kind = kind;
    e.worker = worker;
    e.pid = 100 + worker;
    e.token = token;
    e.at = at;
    e.accepted = accepted;
    e.highest = highest;
    r.register_events.push_back(e);
    return *this;
  }
};

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

// SIGCONT goes out before the orchestrator notes the pause's end, so the register can log the
// woken worker's write a moment before it. The narration missed that refusal (the closing table
// counted it): the line must be there.
TEST(TellPause, ARefusedWriteLoggedJustBeforeThePauseEndIsNarrated) {
  Story story(100 * kMs, 2600 * kMs);
  story.enter(0, 1, 20 * kMs, true, 1);
  story.grant(1, 2, 2100 * kMs).enter(1, 2, 2110 * kMs, true, 2).write(1, 2, 2120 * kMs, true, 2);
  story.write(0, 1, 2599 * kMs, false, 2);
  const std::string told = joined(story.tell());
  EXPECT_THAT(told, HasSubstr("worker 0 holds the lock with token 1, has read the register, and "
                              "is paused for 2.5 s (TTL 2.0 s)"));
  EXPECT_THAT(told, HasSubstr("worker 1 is granted token 2 2.0 s into the pause"));
  EXPECT_THAT(told, HasSubstr("the fence refuses its write: rejected: stale token 1 < 2"));
  EXPECT_TRUE(story.outcome.taken_over);
}

// A pause can catch the holder before its read: the woken worker's read is what the fence
// refuses (it then writes nothing). Before, the story said it had read and told nothing of the
// refusal.
TEST(TellPause, APauseBeforeTheReadEndsInARefusedRead) {
  Story story(100 * kMs, 2600 * kMs);
  story.grant(1, 2, 2100 * kMs).write(1, 2, 2120 * kMs, true, 2);
  story.enter(0, 1, 2601 * kMs, false, 2);
  const std::string told = joined(story.tell());
  EXPECT_THAT(told, HasSubstr("has not read the register yet"));
  EXPECT_THAT(told, HasSubstr("the fence refuses its read: rejected: stale token 1 < 2"));
}

// A read it sent just before the stop is admitted after the pause began: not a refusal, and
// nothing is said until its write after the pause.
TEST(TellPause, WithoutATakeoverTheWriteAfterThePauseIsAccepted) {
  Story story(100 * kMs, 2600 * kMs);
  story.enter(0, 1, 101 * kMs, true, 1).write(0, 1, 2601 * kMs, true, 1);
  const std::vector<std::string> lines = story.tell();
  const std::string told = joined(lines);
  EXPECT_THAT(told, HasSubstr("nobody else is granted the lock during the pause"));
  EXPECT_THAT(told, HasSubstr("its write is accepted"));
  EXPECT_THAT(told, Not(HasSubstr("refuses")));
  EXPECT_FALSE(story.outcome.taken_over);
}

TEST(TellPause, TheTableNumbersAreTheReportsAndARunWithoutAPauseSaysSo) {
  RunRecord record;
  Report report;
  report.grants = 7;
  report.writes_rejected = 2;
  report.overlaps = 1;
  std::vector<std::string> lines;
  const DemoOutcome out =
      tell_pause(record, report, 2s, [&](const std::string& line) { lines.push_back(line); });
  EXPECT_THAT(lines, Contains(HasSubstr("no holder could be paused")));
  EXPECT_EQ(out.tokens, 7U);
  EXPECT_EQ(out.stale_rejected, 2U);
  EXPECT_EQ(out.overlaps, 1U);
  EXPECT_EQ(out.verdict, report.verdict());
}

// The whole in-process story: the lease ends unrenewed, lost() fires (on the library's thread,
// read here under a mutex), the fence refuses the stale write and admits the new holder's.
TEST(MemoryStory, TheStaleWriteIsRefusedLostFiresAndTheVerdictIsSafe) {
  std::vector<std::string> lines;
  auto story = memory_story("memory://demo-story-test", 300ms,
                            [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(story.ok()) << story.status().to_string();
  const std::string told = joined(lines);
  EXPECT_EQ(story->verdict, Verdict::kSafe) << told;
  EXPECT_TRUE(story->violations.empty()) << told;
  EXPECT_EQ(story->tokens, 2U);
  EXPECT_EQ(story->stale_rejected, 1U);
  EXPECT_EQ(story->overlaps, 0U);
  ASSERT_TRUE(story->lost_delay_ms.has_value()) << told;
  EXPECT_LE(*story->lost_delay_ms, 0.0) << "lost() fired after valid_until() in one process";
  EXPECT_TRUE(story->taken_over);
  EXPECT_THAT(told, HasSubstr("worker 2 is granted token 2"));
  EXPECT_THAT(told, HasSubstr("the fence refuses its write: rejected: stale token 1 < 2"));
}

}  // namespace
}  // namespace fencelock::torture
