// Specification of set_log_sink() (fencelock/log.h) and of what fencelock logs: silent until a sink
// is set, filtered by level, a warning naming key, token and owner prefix (never the full owner
// id) when a lease is lost, a debug line when a renewal is not confirmed.
//
// The sink is process-wide: every test installs its own through SinkGuard, which removes it again.
#include "fencelock/log.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/lease_state.h"
#include "core/log_internal.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "core/renewer.h"
#include "fencelock/client.h"
#include "unit/printers.h"

namespace fencelock {
namespace {

using std::chrono::milliseconds;

using namespace std::chrono_literals;
using detail::Clock;

// Generous bound for events that should happen within milliseconds; only reached on failure.
constexpr std::chrono::milliseconds kEventBound = 10s;
// How long a test that expects no message waits for one: a message would follow its cause within
// microseconds.
constexpr std::chrono::milliseconds kSettle = 200ms;

struct Message {
  LogLevel level;
  std::string text;
};

// Collects what a sink receives; waits for a message by content.
class Collector {
 public:
  LogSink sink() {
    return [this](LogLevel level, std::string_view text) {
      fencelock::detail::MutexLock lock(mu_);
      messages_.push_back({level, std::string(text)});
      changed_.notify_all();
    };
  }

  // The first message at `level` containing `part`, waiting up to `bound`; nullopt if none came.
  std::optional<Message> wait_for(LogLevel level, const std::string& part,
                                  std::chrono::milliseconds bound = kEventBound) {
    fencelock::detail::MutexLock lock(mu_);
    std::optional<Message> found;
    changed_.wait_for(lock, bound, [&]() FENCELOCK_REQUIRES(mu_) {
      for (const Message& m : messages_) {
        if (m.level == level && m.text.find(part) != std::string::npos) found = m;
      }
      return found.has_value();
    });
    return found;
  }

  std::vector<Message> messages() const {
    fencelock::detail::MutexLock lock(mu_);
    return messages_;
  }

 private:
  mutable fencelock::detail::Mutex mu_;
  std::condition_variable_any changed_;
  std::vector<Message> messages_ FENCELOCK_GUARDED_BY(mu_);
};

// Installs a sink for one test (none if `collector` is null) and removes whatever sink is set at
// the end, even when the test fails.
class SinkGuard {
 public:
  SinkGuard(Collector* collector, LogLevel min_level) {
    if (collector != nullptr) set_log_sink(collector->sink(), min_level);
  }
  ~SinkGuard() { set_log_sink({}); }
  SinkGuard(const SinkGuard&) = delete;
  SinkGuard& operator=(const SinkGuard&) = delete;
};

Client connect(const std::string& uri) {
  auto client = Client::connect(uri);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return std::move(client).value();
}

TEST(Log, SilentByDefault) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    EXPECT_FALSE(detail::log_enabled(level)) << log_level_name(level);
  }
}

TEST(Log, DeliversMessagesAtOrAboveTheMinimumLevelOnly) {
  Collector collector;
  SinkGuard guard(&collector, LogLevel::kWarning);
  EXPECT_FALSE(detail::log_enabled(LogLevel::kInfo));
  EXPECT_TRUE(detail::log_enabled(LogLevel::kWarning));
  detail::log(LogLevel::kDebug, "debug {}", 1);
  detail::log(LogLevel::kInfo, "info {}", 2);
  detail::log(LogLevel::kWarning, "warning {}", 3);
  detail::log(LogLevel::kError, "error {}", 4);
  std::vector<Message> got = collector.messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].level, LogLevel::kWarning);
  EXPECT_EQ(got[0].text, "warning 3");
  EXPECT_EQ(got[1].level, LogLevel::kError);
  EXPECT_EQ(got[1].text, "error 4");
}

TEST(Log, AReplacedOrRemovedSinkIsNotCalledAgain) {
  Collector first;
  Collector second;
  SinkGuard guard(nullptr, LogLevel::kDebug);
  set_log_sink(first.sink(), LogLevel::kDebug);
  set_log_sink(second.sink(), LogLevel::kDebug);
  detail::log(LogLevel::kInfo, "to the second");
  set_log_sink({});
  EXPECT_FALSE(detail::log_enabled(LogLevel::kError));
  detail::log(LogLevel::kError, "to nobody");
  EXPECT_TRUE(first.messages().empty());
  ASSERT_EQ(second.messages().size(), 1u);
  EXPECT_EQ(second.messages()[0].text, "to the second");
}

TEST(Log, ALostLeaseIsAWarningWithKeyTokenAndOwnerPrefixButNotTheFullOwnerId) {
  Collector collector;
  SinkGuard guard(&collector, LogLevel::kInfo);
  Client client = connect("memory://log-lost");
  auto lease = client.acquire(*LockKey::make("log/lost"), {.ttl = 40ms, .renew = false});
  ASSERT_TRUE(lease.ok());

  auto warning = collector.wait_for(LogLevel::kWarning, "log/lost");
  ASSERT_TRUE(warning.has_value()) << "no warning for the lost lease";
  EXPECT_TRUE(lease->is_lost());
  EXPECT_NE(warning->text.find("token " + std::to_string(lease->token().value())),
            std::string::npos)
      << warning->text;
  EXPECT_NE(warning->text.find(lease->owner().short_hex()), std::string::npos) << warning->text;
  EXPECT_EQ(warning->text.find(lease->owner().hex()), std::string::npos)
      << "full owner id logged: " << warning->text;
  EXPECT_NE(warning->text.find("renewal is off"), std::string::npos) << warning->text;
}

TEST(Log, NothingReachesARemovedSinkWhenALeaseIsLost) {
  Collector collector;
  SinkGuard guard(&collector, LogLevel::kDebug);
  set_log_sink({});
  Client client = connect("memory://log-silent");
  auto lease = client.acquire(*LockKey::make("log/silent"), {.ttl = 40ms, .renew = false});
  ASSERT_TRUE(lease.ok());
  fencelock::detail::Mutex mu;
  std::condition_variable_any lost;
  bool fired = false;
  lease->on_lost([&] {
    fencelock::detail::MutexLock lock(mu);
    fired = true;
    lost.notify_all();
  });
  {
    fencelock::detail::MutexLock lock(mu);
    ASSERT_TRUE(lost.wait_for(lock, kEventBound, [&] { return fired; })) << "never lost";
  }
  ASSERT_EQ(client.metrics().losses, 1u);
  // The warning would be written right after lost() fired.
  EXPECT_FALSE(collector.wait_for(LogLevel::kWarning, "log/silent", kSettle).has_value());
  (void)lease->release();
  EXPECT_TRUE(collector.messages().empty());
}

TEST(Log, AReleaseIsNotALoss) {
  Collector collector;
  SinkGuard guard(&collector, LogLevel::kDebug);
  Client client = connect("memory://log-release");
  auto lease = client.acquire(*LockKey::make("log/released"), {.ttl = 10s});
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(lease->release().ok());
  EXPECT_TRUE(collector.messages().empty());
  EXPECT_EQ(client.metrics().losses, 0u);
}

// A backend whose renewals are never confirmed (servers unreachable), for the Renewer alone.
class UnreachableBackend final : public detail::Backend {
 public:
  std::vector<detail::RenewOutcome> renew_all(std::span<const detail::RenewItem> items,
                                              Clock::time_point) override {
    return std::vector<detail::RenewOutcome>(items.size(),
                                             {detail::RenewOutcome::kUnknown, Clock::time_point{}});
  }
  milliseconds min_ttl() const override { return milliseconds(1); }
  detail::TryResult try_acquire(const detail::GrantRequest&, Clock::time_point) override {
    return {Status(Code::kUnavailable, "unreachable"), std::nullopt, milliseconds(0)};
  }
  Status release(const LockKey&, const OwnerId&, Clock::time_point) override {
    return Status(Code::kUnavailable, "unreachable");
  }
  Result<std::optional<detail::HolderRow>> inspect(const LockKey&, Clock::time_point) override {
    return Status(Code::kUnavailable, "unreachable");
  }
  Result<std::vector<detail::HolderRow>> list(std::string_view,
                                              const detail::ListBounds&) override {
    return Status(Code::kUnavailable, "unreachable");
  }
  std::string describe() const override { return "unreachable://"; }
};

// Client::list's conversion: rows whose name is no LockKey (empty, longer than 512 bytes, with a
// NUL byte) are left out, the others kept in order, and one warning counts the left-out ones.
TEST(Log, ListLeavesOutNamesThatAreNotLockKeysWithOneWarning) {
  using detail::HolderRow;
  Collector collector;
  set_log_sink(collector.sink(), LogLevel::kWarning);
  std::vector<HolderRow> rows;
  for (const std::string& name :
       {std::string("a"), std::string(), std::string(513, 'x'), std::string("b\0c", 3),
        std::string(512, 'y'), std::string("z")}) {
    rows.push_back(HolderRow{name, "1a2b3c4d", FencingToken(7), 5s, "{}"});
  }
  const std::vector<HolderInfo> kept = detail::holders_of(rows);
  set_log_sink({});
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].key.str(), "a");
  EXPECT_EQ(kept[1].key.str(), std::string(512, 'y'));
  EXPECT_EQ(kept[2].key.str(), "z");
  EXPECT_EQ(kept[2].owner_prefix, "1a2b3c4d");
  EXPECT_EQ(kept[2].token, FencingToken(7));
  EXPECT_EQ(kept[2].ttl_remaining, 5s);
  const std::vector<Message> messages = collector.messages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].level, LogLevel::kWarning);
  EXPECT_NE(messages[0].text.find("left out 3 held lock(s)"), std::string::npos)
      << messages[0].text;
  EXPECT_NE(messages[0].text.find("the first is 0 bytes long"), std::string::npos)
      << messages[0].text;

  set_log_sink(collector.sink(), LogLevel::kWarning);
  EXPECT_EQ(detail::holders_of({HolderRow{"only", "", std::nullopt, 0s, ""}}).size(), 1u);
  set_log_sink({});
  EXPECT_EQ(collector.messages().size(), 1u) << "no warning when nothing is left out";
}

TEST(Log, AnUnconfirmedRenewalIsDebugThenTheLossAWarningAndBothAreCounted) {
  Collector collector;
  SinkGuard guard(&collector, LogLevel::kDebug);
  UnreachableBackend backend;
  detail::Metrics metrics;
  detail::Renewer renewer(backend, &metrics);
  auto lease = std::make_shared<detail::LeaseState>(*LockKey::make("log/renew"), OwnerId::random(),
                                                    FencingToken(7), 90ms, /*renew=*/true);
  lease->set_valid_until(Clock::now() + 90ms);
  renewer.add(lease);

  auto debug = collector.wait_for(LogLevel::kDebug, "not confirmed");
  ASSERT_TRUE(debug.has_value()) << "no debug line for the unconfirmed renewal";
  EXPECT_NE(debug->text.find("'log/renew' (token 7)"), std::string::npos) << debug->text;
  auto warning = collector.wait_for(LogLevel::kWarning, "no renewal was confirmed");
  ASSERT_TRUE(warning.has_value()) << "no warning for the lease lost at its validity";
  EXPECT_TRUE(lease->lost_source.stop_requested());

  MetricsSnapshot m = metrics.snapshot();
  EXPECT_GE(m.renewal_failures, 1u);
  EXPECT_EQ(m.renewals, 0u);
  EXPECT_GE(m.renew_latency.count, 1u) << "rounds are timed";
  EXPECT_EQ(m.losses, 1u);
}

}  // namespace
}  // namespace fencelock
