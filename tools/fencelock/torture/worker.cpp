#include "torture/worker.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/mutex.h"
#include "fencelock/client.h"
#include "private_files.h"
#include "torture/shared_register.h"

namespace fencelock::torture {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_racing{false};  // cancel-race: SIGUSR1 starts it, SIGUSR2 ends it

extern "C" void on_term(int) { g_stop = true; }
extern "C" void on_race(int signo) { g_racing = signo == SIGUSR1; }

Nanos to_nanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Appends whole lines; shared with lost() callbacks on the library's thread.
class LogFile {
 public:
  // Never through a symlink planted in --work-dir (private_files.h).
  explicit LogFile(const std::string& path) : file_(cli::open_no_follow(path, /*append=*/true)) {}
  ~LogFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  bool ok() const { return file_ != nullptr; }
  void line(const std::string& text) {
    fencelock::detail::MutexLock lock(mu_);
    std::fputs((text + "\n").c_str(), file_);
    std::fflush(file_);
  }

 private:
  fencelock::detail::Mutex mu_;
  std::FILE* file_;
};

}  // namespace

// The lease report (events.h LeaseReport) as one JSON line.
std::string lease_line(const WorkerArgs& args, std::uint64_t token, Nanos granted_at,
                       const Lease& lease, bool lost, Nanos fired_at, bool callback_ran,
                       Nanos observed_at) {
  return nlohmann::json{{"t", "lease"},
                        {"worker", args.id},
                        {"pid", static_cast<long>(::getpid())},
                        {"token", token},
                        {"granted_at", granted_at},
                        {"valid_until", to_nanos(lease.valid_until())},
                        {"lost", lost},
                        {"callback_ran", callback_ran},
                        {"fired_at", fired_at},
                        {"observed_at", observed_at}}
      .dump();
}

int run_worker(const WorkerArgs& args) {
  const bool async_api = args.api == "async";
  std::signal(SIGTERM, on_term);
  std::signal(SIGINT, on_term);
  std::signal(SIGUSR1, on_race);
  std::signal(SIGUSR2, on_race);
  std::minstd_rand random(static_cast<unsigned>(::getpid()));
  auto log = std::make_shared<LogFile>(args.log);
  if (!log->ok()) return 70;
  RegisterClient reg(args.socket);
  reg.hello(args.id, static_cast<long>(::getpid()));
  // The worker's clocks, seen by the register whatever the worker is doing (waiting included):
  // the evidence that a clock fault took effect.
  std::jthread ticker([&reg, id = args.id](std::stop_token stop) {
    while (!stop.stop_requested() && !g_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      try {
        reg.tick(id);
      } catch (const std::exception&) {
        return;
      }
    }
  });
  std::optional<Client> client;
  while (!client && !g_stop) {
    auto connected = Client::connect(args.backend);
    if (connected.ok()) {
      client.emplace(std::move(*connected));
    } else {
      log->line(fmt::format(R"({{"t":"connect_error","at":{},"status":"{}"}})", monotonic_now(),
                            std::string(code_name(connected.code()))));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // many-leases: the Client's renewer carries these along with the contended lease. Not named
  // under KEY/: on etcd the locks nested under a lock's name are in its prefix, and every
  // acquisition of KEY would read them all.
  std::vector<Lease> extra;
  for (int i = 0; i < args.extra_leases && !g_stop; ++i) {
    const auto extra_key = *LockKey::make(fmt::format("{}-extra/{}/{}", args.key, args.id, i));
    for (int attempt = 0; attempt < 50 && !g_stop; ++attempt) {  // through faults, bounded
      auto held = client->acquire(extra_key, {.ttl = std::chrono::seconds(60)});
      if (held.ok()) {
        extra.push_back(std::move(*held));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (args.extra_leases > 0) {
    log->line(nlohmann::json{{"t", "extra"}, {"worker", args.id}, {"held", extra.size()}}.dump());
  }
  const auto key = *LockKey::make(args.key);
  const std::chrono::milliseconds ttl(args.ttl_ms), half(args.critical_ms / 2);
  std::string last_error;
  std::uint64_t cycles = 0;
  while (!g_stop) {
    try {
      reg.acquiring(args.id);
    } catch (const std::exception&) {
      return 70;  // the orchestrator went away
    }
    // cancel-race: waits that end (time out, or are cancelled) about when a holder releases.
    const bool racing = g_racing.load();
    const std::chrono::milliseconds race_after(
        1 + static_cast<int>(random() % static_cast<unsigned>(3 * args.critical_ms + 1)));
    std::stop_source cancel;
    std::optional<std::jthread> canceller;
    AcquireOptions options{.ttl = ttl, .wait = std::chrono::seconds(5)};
    if (racing && cycles % 2 == 0) {
      options.wait = race_after;
    } else if (racing) {
      options.stop = cancel.get_token();
      canceller.emplace([&cancel, race_after](std::stop_token stop) {
        fencelock::detail::Mutex mu;
        std::condition_variable_any cv;
        fencelock::detail::MutexLock lock(mu);
        // Cancels unless the acquisition returned first (it then stops this thread).
        if (!cv.wait_for(lock, stop, race_after, [] { return false; }) && !stop.stop_requested())
          cancel.request_stop();
      });
    }
    auto lease =
        async_api ? client->acquire_future(key, options).get() : client->acquire(key, options);
    canceller.reset();
    if (racing && (lease.code() == Code::kCancelled || lease.code() == Code::kLocked)) {
      log->line(nlohmann::json{{"t", "race"},
                               {"worker", args.id},
                               {"at", monotonic_now()},
                               {"ended", std::string(code_name(lease.code()))}}
                    .dump());
      ++cycles;
      continue;
    }
    if (!lease.ok()) {
      if (lease.code() != Code::kLocked) {
        // One line per new error, for diagnosis: not every retry.
        if (lease.status().to_string() != last_error) {
          last_error = lease.status().to_string();
          log->line(nlohmann::json{{"t", "acquire_error"},
                                   {"worker", args.id},
                                   {"at", monotonic_now()},
                                   {"status", last_error}}
                        .dump());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      continue;
    }
    last_error.clear();
    const std::uint64_t token = lease->token().value();
    const Nanos granted_at = monotonic_now();
    // The callback only notes the time (it may run on the library's thread while this one
    // releases); the report is written below, once the critical section is over.
    auto fired_at = std::make_shared<std::atomic<Nanos>>(0);
    lease->on_lost([fired_at] { fired_at->store(monotonic_now()); });
    try {
      reg.granted(args.id, token);
      auto read = reg.enter(args.id, token);
      if (read.ok) {
        // Every 8th critical section outlasts a renewal period (3/4 TTL): the lease must be
        // renewed in time, which a worker with a slow clock fails to do.
        std::this_thread::sleep_for(cycles++ % 8 == 0 ? ttl * 3 / 4 : half);
        (void)reg.write(args.id, token, read.number + 1);
        std::this_thread::sleep_for(half);
      }
      reg.exit(args.id, token);
    } catch (const std::exception&) {
      return 70;  // the orchestrator went away
    }
    // A worker that was frozen past its validity wakes at the same time as the library's
    // watchdog: give it a moment to fire lost() before looking. A lease whose validity passed
    // without lost() is reported as such (lost false, valid_until < observed_at).
    for (int i = 0;
         i < 200 && !lease->is_lost() && lease->valid_until() < std::chrono::steady_clock::now();
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Nanos observed_at = monotonic_now();
    bool callback_ran = true;
    // One reading of is_lost() decides the report: lost() may fire while it is being written.
    const bool lost = lease->is_lost();
    if (lost) {  // lost before the release: a real loss, not our own release
      // lost() is visible a moment before its callbacks have run.
      for (int i = 0; i < 100 && fired_at->load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (fired_at->load() == 0) {
        // The callback has not run: it fired no earlier than now (the checker counts it late).
        callback_ran = false;
        observed_at = monotonic_now();
        fired_at->store(observed_at);
      }
    }
    log->line(lease_line(args, token, granted_at, *lease, lost, fired_at->load(), callback_ran,
                         observed_at));
    if (async_api) {
      std::promise<Status> released;
      lease->release_async([&released](const Status& s) { released.set_value(s); });
      (void)released.get_future().get();
    } else {
      (void)lease->release();
    }
  }
  return 0;
}

}  // namespace fencelock::torture
