// Helpers for the CLI integration tests: run the real `fencelock` binary (FENCELOCK_CLI, set by
// CMake) against real redis-server processes and observe files it and its command write.
//
// Waiting is always for an observable event (a file appears, a process exits, a server sees a
// connection), in loops bounded by a timeout; never a bare sleep.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/redis_server.h"

namespace fencelock::testing {

using namespace std::chrono_literals;

// Path of the fencelock binary under test.
std::string cli_path();

// {cli_path(), args...}.
std::vector<std::string> cli_argv(const std::vector<std::string>& args);

// Runs fencelock with `args` to completion. FENCELOCK_BACKEND is removed from the environment
// unless `env` sets it.
RunResult run_cli(const std::vector<std::string>& args, std::vector<std::string> env = {},
                  std::chrono::milliseconds timeout = 60s);

// Starts fencelock with `args` in the background, stdout/stderr into the given files.
ChildProcess spawn_cli(const std::vector<std::string>& args, const std::string& stdout_file,
                       const std::string& stderr_file, std::vector<std::string> env = {});

// Waiting for an event: eventually() of support/process.h.

bool file_exists(const std::string& path);

// Alive: the pid exists and is not a zombie (a zombie re-parented to a container's init that
// never reaps still has a /proc entry, but runs nothing).
bool process_alive(pid_t pid);

// The guardian process of the `fencelock run` with pid `fencelock` (named "fencelock-guard"; the
// one that shares a pipe with it), found in /proc; nullopt if there is none.
std::optional<pid_t> guardian_of(pid_t fencelock);
std::vector<std::string> read_lines(const std::string& path);

// Lock keys ("fencelock:{K}") held on `server`, leaving out the fencing counters ("...:fence")
// and the tombstones of released attempts ("...:dead:VALUE").
std::vector<std::string> held_lock_keys(RedisServer& server);

// True if `text` has exactly one line (one '\n', at the end) and starts with "fencelock: ".
bool is_one_error_line(const std::string& text);

// `stderr_text` without the warning lines of connecting ("fencelock: warning: ...", or JSON
// objects with "warning"): e.g. the one that Debian's etcd draws with allow_stale_leader_revoke.
std::string without_warnings(const std::string& stderr_text);

}  // namespace fencelock::testing
