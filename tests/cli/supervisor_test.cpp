// The supervisor of `fencelock run` (tools/fencelock/supervisor.h) with a stand-in lease: the
// command never runs past the lease's valid_until() unless --grace-outlives-lease was given, and
// a command that handles SIGTERM gets it while there is still validity left, stopped or not. Its
// guardian (guardian.h) kills the command at the deadline it was last told when the supervisor
// does not run, follows the deadlines a renewal moves, and its death stops the command.
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
#include <optional>
#include <string>

#include <fmt/format.h>

#include "guardian.h"
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
// Stops itself once its trap is set; handles SIGTERM (once continued) by exiting 0.
const std::string kStopsItself = "trap 'exit 0' TERM; : > \"$READY\"; kill -STOP $$; exit 5";
// Marks SIGTERM in $MARK and runs on until SIGKILL.
const std::string kMarksTerm =
    "trap ': > \"$MARK\"' TERM; : > \"$READY\"; while :; do sleep 0.05; done";

// The state letter of `pid` (/proc/PID/stat), '?' if it is gone.
char state_of(pid_t pid) {
  const std::string stat = testing::read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

struct Fixture {
  // The guardian is forked before anything else (this test binary starts no threads).
  Fixture()
      : signals(SignalChannel::open()),
        guardian(Guardian::start()),
        lost(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  void fire_lost() const {
    std::uint64_t one = 1;
    ASSERT_EQ(::write(lost.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  // The next test's channel must find the signals unblocked, as fencelock does (its command
  // inherits that mask).
  ~Fixture() {
    if (signals.ok()) pthread_sigmask(SIG_SETMASK, &signals->original_mask(), nullptr);
    std::filesystem::remove_all(dir);
  }
  // Starts `script` under /bin/sh and waits until it has created $READY (its trap is set).
  // With `armed`, the command arms the guardian itself, as under `fencelock run`.
  pid_t spawn(const std::string& script, bool armed = false) {
    const std::string ready = dir + "/ready";
    Spawned child = spawn_command({"/bin/sh", "-c", script},
                                  {"PATH=/usr/bin:/bin", "READY=" + ready, "MARK=" + mark()},
                                  signals->original_mask(), -1, armed ? guardian.arming_fd() : -1);
    EXPECT_TRUE(eventually([&] { return std::filesystem::exists(ready); }, 10s))
        << "the command did not start";
    return child.pid;
  }
  std::string mark() const { return dir + "/mark"; }
  // Waits for `pid` to exit without supervising it (a frozen supervisor); its wait status.
  std::optional<int> reap_within(pid_t pid, std::chrono::milliseconds limit) const {
    int status = 0;
    if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit)) {
      return std::nullopt;
    }
    return status;
  }
  Result<SignalChannel> signals;
  Guardian guardian;
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

TEST(Supervisor, ASignalForwardedToACommandThatStoppedItselfLands) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kStopsItself);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(eventually([&] { return state_of(pid) == 'T'; }, 10s)) << state_of(pid);
  // A SIGTERM to fencelock, which the signalfd receives and forwards. The lease is not renewed
  // and valid for 3 s: before, the stopped command never handled the signal, and SIGKILL came
  // when the validity ended.
  ::kill(::getpid(), SIGTERM);
  const Clock::time_point valid_until = Clock::now() + 3000ms;
  const LeaseDeadline lease{[&] { return valid_until; }, 3000ms, false};
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, {});
  ASSERT_TRUE(WIFEXITED(exit.wait_status)) << "killed by signal " << WTERMSIG(exit.wait_status);
  EXPECT_EQ(WEXITSTATUS(exit.wait_status), 0) << "the TERM trap did not run";
  EXPECT_FALSE(exit.sent_sigkill);
}

TEST(Supervisor, SigtermAfterALossReachesACommandThatStoppedItself) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kStopsItself);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(eventually([&] { return state_of(pid) == 'T'; }, 10s)) << state_of(pid);
  const Clock::time_point valid_until = Clock::now() + 2000ms;
  const LeaseDeadline lease{[&] { return valid_until; }, 3000ms, false};
  f.fire_lost();
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, {});
  EXPECT_TRUE(exit.sent_sigterm);
  ASSERT_TRUE(WIFEXITED(exit.wait_status)) << "killed by signal " << WTERMSIG(exit.wait_status);
  EXPECT_EQ(WEXITSTATUS(exit.wait_status), 0);
  EXPECT_FALSE(exit.sent_sigkill);
}

TEST(Guardian, KillsTheCommandAtItsDeadlineWhenTheSupervisorDoesNotRun) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  ASSERT_TRUE(f.guardian.active());
  const pid_t pid = f.spawn(kStubborn);
  ASSERT_GT(pid, 0);
  const Clock::time_point deadline = Clock::now() + 200ms;
  f.guardian.set_deadlines(Guardian::kNever, deadline);
  f.guardian.arm(pid);
  // Nothing supervises: the test thread only waits, as a stopped fencelock would.
  const std::optional<int> status = f.reap_within(pid, 10s);
  ASSERT_TRUE(status.has_value()) << "the command outlived the guardian's deadline";
  EXPECT_GE(Clock::now(), deadline) << "killed before its deadline";
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  EXPECT_TRUE(f.guardian.killed_at_deadline());
  EXPECT_FALSE(f.guardian.sent_sigterm());
  const pid_t guardian = f.guardian.pid();
  ASSERT_GT(guardian, 1);
  f.guardian.stand_down();
  EXPECT_TRUE(
      eventually([&] { return state_of(guardian) == '?' || state_of(guardian) == 'Z'; }, 10s))
      << "the guardian did not exit when stood down";
}

// stand_down() returns once the guardian has exited: until then it may still be in a kill
// round, signalling every child of this process (under ASan it killed the leak checker's tracer
// as the test exited, and the test process stayed stopped until ctest's timeout).
TEST(Guardian, StandDownReturnsOnceTheGuardianHasExited) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kStubborn);
  ASSERT_GT(pid, 0);
  f.guardian.set_deadlines(Guardian::kNever, Clock::now() + 100ms);
  f.guardian.arm(pid);
  ASSERT_TRUE(f.reap_within(pid, 10s).has_value()) << "the guardian did not kill the command";
  const pid_t guardian = f.guardian.pid();
  ASSERT_GT(guardian, 1);
  f.guardian.stand_down();
  const char state = state_of(guardian);
  EXPECT_TRUE(state == '?' || state == 'Z') << "the guardian still runs (state " << state << ")";
}

// The command arms the guardian before it runs: a supervisor stopped right after fork() (before
// it could arm the guardian itself) leaves no command unguarded.
TEST(Guardian, TheCommandArmsItBeforeItRuns) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  f.guardian.set_deadlines(Guardian::kNever, Clock::now() + 100ms);
  const pid_t pid = f.spawn(kStubborn, /*armed=*/true);
  ASSERT_GT(pid, 0);
  // No arm() from here.
  const std::optional<int> status = f.reap_within(pid, 10s);
  ASSERT_TRUE(status.has_value()) << "the guardian was not armed by the command";
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  f.guardian.stand_down();
}

TEST(Guardian, WithGraceOutlivesLeaseItSendsSigtermAndContinuesBeforeSigkill) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kMarksTerm);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);  // SIGTERM must wake it
  const Clock::time_point now = Clock::now();
  f.guardian.set_deadlines(now + 100ms, now + 600ms);
  f.guardian.arm(pid);
  const std::optional<int> status = f.reap_within(pid, 10s);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  EXPECT_TRUE(std::filesystem::exists(f.mark())) << "SIGTERM did not come, or found it stopped";
  EXPECT_TRUE(f.guardian.sent_sigterm());
  EXPECT_FALSE(f.guardian.claim_termination()) << "SIGTERM is sent once";
  f.guardian.stand_down();
}

// A renewal moves the deadline: the supervisor tells the guardian, which then does not kill a
// command whose lease is still valid.
TEST(Guardian, FollowsTheDeadlinesThatRenewalsMove) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const LeaseDeadline lease{[] { return Clock::now() + 300ms; }, 300ms, false};
  const pid_t pid = f.spawn(": > \"$READY\"; sleep 1.5; exit 3");
  ASSERT_GT(pid, 0);
  const GuardianDeadlines first = guardian_deadlines(lease.valid_until(), 5000ms, lease);
  f.guardian.set_deadlines(first.term_at, first.kill_at);
  f.guardian.arm(pid);
  ChildExit exit = supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, {}, &f.guardian);
  f.guardian.stand_down();
  EXPECT_FALSE(exit.guardian_killed);
  EXPECT_FALSE(exit.sent_sigterm);
  ASSERT_TRUE(WIFEXITED(exit.wait_status)) << "killed by signal " << WTERMSIG(exit.wait_status);
  EXPECT_EQ(WEXITSTATUS(exit.wait_status), 3);
}

TEST(Guardian, ItsDeathStopsTheCommand) {
  Fixture f;
  ASSERT_TRUE(f.signals.ok());
  const pid_t pid = f.spawn(kPolite);
  ASSERT_GT(pid, 0);
  // Not renewed: without the guardian's exit noticed, SIGTERM would come only 1 s before the
  // validity ends, as for a lease at risk.
  const Clock::time_point valid_until = Clock::now() + 3000ms;
  const LeaseDeadline lease{[&] { return valid_until; }, 2000ms, false};
  f.guardian.arm(pid);
  ASSERT_GT(f.guardian.pid(), 1);
  ASSERT_EQ(::kill(f.guardian.pid(), SIGKILL), 0);
  bool told = false;
  SupervisionHooks hooks;
  hooks.on_guardian_lost = [&] { told = true; };
  ChildExit exit =
      supervise_command(pid, *f.signals, f.lost.get(), 5000ms, lease, hooks, &f.guardian);
  EXPECT_TRUE(exit.guardian_lost);
  EXPECT_TRUE(told);
  EXPECT_TRUE(exit.sent_sigterm);
  EXPECT_FALSE(exit.lease_at_risk) << "SIGTERM came for the lease, not for the guardian";
  ASSERT_TRUE(WIFEXITED(exit.wait_status));
  EXPECT_EQ(WEXITSTATUS(exit.wait_status), 0);
}

TEST(GuardianDeadlines, DefaultKillsJustBeforeTheValidityGraceOutlivesLeaseTermsThenKills) {
  const Clock::time_point valid_until = Clock::now() + 10s;
  const LeaseDeadline strict{nullptr, 1000ms, false};
  const GuardianDeadlines d = guardian_deadlines(valid_until, 5000ms, strict);
  EXPECT_EQ(d.term_at, Guardian::kNever);
  EXPECT_LT(d.kill_at, valid_until);
  EXPECT_GT(d.kill_at, valid_until - kill_margin(1000ms)) << "after the supervisor's SIGKILL";
  const LeaseDeadline lenient{nullptr, 1000ms, true};
  const GuardianDeadlines g = guardian_deadlines(valid_until, 5000ms, lenient);
  EXPECT_EQ(g.term_at, valid_until);
  EXPECT_EQ(g.kill_at, valid_until + 5000ms);
}

TEST(GuardianDeadlines, PublicationLooksAThirdOfTheTtlBeforeAndThenHalfway) {
  const Clock::time_point published = Clock::now() + 10s;
  EXPECT_EQ(next_publication(published - 9s, published, 3000ms), published - 1000ms);
  EXPECT_EQ(next_publication(published - 800ms, published, 3000ms), published - 400ms);
  EXPECT_EQ(next_publication(published - 1ms, published, 3000ms), published);
  EXPECT_EQ(next_publication(published, published, 3000ms), Clock::time_point::max());
}

}  // namespace
}  // namespace fencelock::cli
