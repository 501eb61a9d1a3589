// Real redis-server processes for integration tests.
//
// A RedisServer is one redis-server child on 127.0.0.1 with its own temporary directory, no RDB
// snapshots, and (unless asked) no AOF. It is started with
//   --port P --bind 127.0.0.1 --save "" --appendonly no --dir TMP --daemonize no
//   --protected-mode no --logfile TMP/redis.log
// plus, per RedisServerOptions:
//   password      --requirepass PASSWORD: the `default` user needs AUTH PASSWORD.
//   acl_user      --user NAME on >ACL_PASSWORD ~* &* +@all: an extra user with full rights. The
//                 `default` user is left as configured above (no password unless `password` is
//                 set), so a test can check both the ACL login and, separately, a password-only
//                 login.
//   appendonly    --appendonly yes --appendfsync always: data survives kill() + restart(), the
//                 persistence assumption of docs/PROTOCOLS.md, "Redis and Redlock".
// The helpers in this file (command(), keys(), readiness checks) authenticate as acl_user when it
// is set, else with `password` when that is set, else not at all.
//
// The server is started with PR_SET_PDEATHSIG, so it dies with the thread that started it: create
// servers on the test's main thread (SetUp, SetUpTestSuite, a fixture), not on a worker thread
// that exits before the test ends. This keeps servers from outliving a test binary that ctest
// kills on timeout.
//
// Failures throw std::runtime_error with a message that says what to do (e.g. install
// redis-server) and includes the tail of the server's log, so `ASSERT_NO_THROW` or a plain call in
// SetUp reports them clearly.
//
// Thread-safety: command(), command_count() and keys() each use a fresh connection and may be
// called from several threads at once; kill(), restart(), pause() and resume() must not race with
// each other or with destruction.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/process.h"

namespace fencelock::testing {

struct RedisServerOptions {
  std::string password;      // "" = default user without password
  std::string acl_user;      // "" = no extra ACL user
  std::string acl_password;  // password of acl_user
  bool appendonly = false;   // AOF with fsync always
};

class RedisServer {
 public:
  // Starts redis-server (found in PATH, else /usr/bin/redis-server) on a free loopback port and
  // waits until it answers PING (at most 10 s). Throws std::runtime_error if redis-server is
  // missing, exits, or does not answer in time.
  static std::unique_ptr<RedisServer> start(RedisServerOptions options = {});

  RedisServer(RedisServer&& other) noexcept;
  RedisServer& operator=(RedisServer&& other) noexcept;
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  // SIGKILL, reap, remove the temporary directory. Never throws.
  ~RedisServer();

  std::uint16_t port() const { return port_; }
  std::string address() const;  // "127.0.0.1:PORT"
  std::string uri() const;      // "redis://127.0.0.1:PORT", no credentials
  // "redis://USER:PASS@127.0.0.1:PORT" (percent-encoded) with the credentials the helpers use;
  // the same as uri() for a server without password or ACL user.
  std::string uri_with_credentials() const;
  const RedisServerOptions& options() const { return options_; }
  const std::string& directory() const { return dir_; }
  std::string log_path() const;  // TMP/redis.log
  pid_t pid() const;             // of the current (or last) process; -1 if none

  // SIGKILL and reap. The port number is kept for restart() (not held open: another process
  // could take it in between, which on loopback in a test run is unlikely). No-op if not running.
  void kill();
  // Starts again on the same port with the same options (killing the current process first if it
  // is running) and waits until it answers PING. Without appendonly the data is gone; with it,
  // the AOF in directory() is replayed. Throws std::runtime_error like start().
  void restart();
  // SIGSTOP / SIGCONT: a paused server keeps its connections open but answers nothing.
  void pause();
  void resume();
  // True while the process has not exited (a paused server is alive).
  bool alive();

  // Runs one command on a fresh connection (authenticated as described above; 5 s timeout) and
  // renders the reply as text: strings and status replies as is, integers in decimal, nil as
  // "(nil)", arrays as their rendered elements joined by '\n' ("" when empty), errors as the
  // server's error text (e.g. "ERR unknown command ...", "WRONGTYPE ...", "NOSCRIPT ...").
  // Throws std::runtime_error when it cannot connect or the connection fails.
  std::string command(const std::vector<std::string>& args);
  // Calls of a command since start (or the last CONFIG RESETSTAT) from INFO commandstats, e.g.
  // "evalsha", "subscribe", "client|list"; 0 if never called. Case-insensitive.
  long long command_count(std::string_view command_name);
  // Keys matching `pattern`, via SCAN (no KEYS); sorted, without duplicates.
  std::vector<std::string> keys(std::string_view pattern = "*");
  // The last `lines` lines of the server log, for failure messages.
  std::string log_tail(int lines = 20) const;

 private:
  RedisServer(RedisServerOptions options, std::string dir, std::string executable);
  void launch();            // spawns on port_
  void wait_until_ready();  // PING loop, throws on exit or timeout
  std::vector<std::string> server_args() const;
  void destroy() noexcept;

  RedisServerOptions options_;
  std::string dir_;
  std::string executable_;
  std::uint16_t port_ = 0;
  std::optional<ChildProcess> process_;  // empty before the first launch
};

// The fencing counter floor of src/redis/scripts/counter.lua at `server`'s clock plus `ahead`:
// (server ms + ahead) * 2^20, from its TIME. A counter set to it runs `ahead` before the clock.
std::uint64_t clock_floor(RedisServer& server,
                          std::chrono::milliseconds ahead = std::chrono::milliseconds(0));

// N independent redis-server instances (no replication between them), as Redlock expects.
class RedisCluster {
 public:
  // Starts n servers with the same options. Throws std::runtime_error like RedisServer::start().
  static std::unique_ptr<RedisCluster> start(int n, const RedisServerOptions& options = {});

  // REQUIRES: 0 <= i < size().
  RedisServer& operator[](int i);
  int size() const { return static_cast<int>(servers_.size()); }
  // "redlock://127.0.0.1:P1,127.0.0.1:P2,..." without credentials.
  std::string redlock_uri() const;
  // The same with "USER:PASS@" (percent-encoded) as in RedisServer::uri_with_credentials().
  std::string redlock_uri_with_credentials() const;

 private:
  std::vector<std::unique_ptr<RedisServer>> servers_;
};

}  // namespace fencelock::testing
