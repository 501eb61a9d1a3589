// The supervisor of `fencelock run` (tools/fencelock/supervisor.h) with a stand-in lease: the
// command never runs past the lease's valid_until() unless --grace-outlives-lease was given, and
// a command that handles SIGTERM gets it while there is still validity left.
#include "supervisor.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>

#include "signals.h"
#include "support/process.h"
#include "unique_fd.h"

namespace fencelock::cli {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::eventually;
using testing::make_temp_dir;

// Commands that create the file $READY once their SIGTERM trap is set: one ignores SIGTERM and
// runs until SIGKILL, one exits 0 on SIGTERM.
const std::string kStubborn = "trap '' TERM; : > \"$READY\"; while :; do sleep 0.05; done";
const std::string kPolite = "trap 'exit 0' TERM; : > \"$READY\"; while :; do sleep 0.05; done";

struct Fixture {
  Fixture() : signals(SignalChannel::open()), lost(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  void fire_lost() const {
    std::uint64_t one = 1;
    ASSERT_EQ(::write(lost.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
  // Starts `script` under /bin/sh and waits until it has created $READY (its trap is set).
  pid_t spawn(const std::string& script) {
    const std::string ready = dir + "/ready";
    Spawned child =
        spawn_command({"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin", "READY=" + ready},
                      signals->original_mask());
    EXPECT_TRUE(eventually([&] { return std::filesystem::exists(ready); }, 10s))
        << "the command did not start";
    return child.pid;
  }
  Result<SignalChannel> signals;
  UniqueFd lost;
  std::string dir = make_temp_dir("fencelock-supervisor-");
};

TEST(Supervisor, AfterALossSigkillComesNoLaterThanTheValidityEvenWithALongerGrace) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kStubborn);
  ASSERT_GT(pid, 0);
  const Clock::time_point valid_until = Clock::now() + 400ms;
  const LeaseDeadline lease{[&] { return valid_until; }, 1000ms, false};
  f.fire_lost();
  bool killed_at_validity = false;
  SupervisionHooks hooks;
  hooks.on_kill = [&](bool at_validity) { killed_at_validity = at_validity; };
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, hooks);
  EXPECT_TRUE(exit.lease_lost);
  EXPECT_TRUE(exit.sent_sigterm);
  EXPECT_TRUE(exit.sent_sigkill);
  EXPECT_TRUE(killed_at_validity);
  ASSERT_TRUE(WIFSIGNALED(exit.wait_status));
  EXPECT_EQ(WTERMSIG(exit.wait_status), SIGKILL);
  ASSERT_TRUE(exit.kill_deadline.has_value());
  EXPECT_LE(*exit.kill_deadline, valid_until) << "the command was allowed past its validity";
  EXPECT_EQ(*exit.kill_deadline, valid_until - kill_margin(1000ms));
}

TEST(Supervisor, RenewalsThatStopSendSigtermWhileValidityIsLeftSoACleanExitFitsInIt) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kPolite);
  ASSERT_GT(pid, 0);
  // Never renewed: valid_until stays where it is; the lead is min(5 s, ttl/2) = 500 ms.
  const Clock::time_point valid_until = Clock::now() + 800ms;
  const LeaseDeadline lease{[&] { return valid_until; }, 1000ms, false};
  std::chrono::milliseconds left_at_term{-1};
  SupervisionHooks hooks;
  hooks.on_lease_at_risk = [&](std::chrono::milliseconds left) { left_at_term = left; };
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, hooks);
  EXPECT_FALSE(exit.lease_lost);
  EXPECT_TRUE(exit.lease_at_risk);
  EXPECT_TRUE(exit.sent_sigterm);
  EXPECT_FALSE(exit.sent_sigkill) << "the command exits on SIGTERM";
  ASSERT_TRUE(WIFEXITED(exit.wait_status));
  EXPECT_EQ(WEXITSTATUS(exit.wait_status), 0);
  EXPECT_LE(left_at_term, termination_lead(5000ms, 1000ms));
  EXPECT_GE(left_at_term.count(), 0);
  ASSERT_TRUE(exit.kill_deadline.has_value());
  EXPECT_LE(*exit.kill_deadline, valid_until);
}

TEST(Supervisor, ALeaseThatKeepsBeingRenewedIsNeverCutShort) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  // Renewed continuously: always a whole TTL ahead.
  const LeaseDeadline lease{[] { return Clock::now() + 1000ms; }, 1000ms, false};
  const pid_t pid = f.spawn(": > \"$READY\"; sleep 1; exit 3");
  ASSERT_GT(pid, 0);
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, {});
  EXPECT_FALSE(exit.sent_sigterm);
  EXPECT_FALSE(exit.lease_at_risk);
  ASSERT_TRUE(WIFEXITED(exit.wait_status));
  EXPECT_EQ(WEXITSTATUS(exit.wait_status), 3);
}

TEST(Supervisor, GraceOutlivesLeaseKeepsTheWholeGraceAfterALoss) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kStubborn);
  ASSERT_GT(pid, 0);
  const Clock::time_point valid_until = Clock::now() + 50ms;
  const LeaseDeadline lease{[&] { return valid_until; }, 1000ms, true};
  f.fire_lost();
  const Clock::time_point lost_at = Clock::now();
  bool killed_at_validity = true;
  SupervisionHooks hooks;
  hooks.on_kill = [&](bool at_validity) { killed_at_validity = at_validity; };
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 300ms, lease, hooks);
  EXPECT_TRUE(exit.sent_sigkill);
  EXPECT_FALSE(killed_at_validity);
  ASSERT_TRUE(exit.kill_deadline.has_value());
  EXPECT_GE(*exit.kill_deadline, lost_at + 300ms);
  EXPECT_GT(*exit.kill_deadline, valid_until) << "the explicit choice: past the validity";
}

}  // namespace
}  // namespace fencelock::cli
