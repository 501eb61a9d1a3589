// Real PostgreSQL 15 servers for integration tests.
//
// A PostgresServer is one postmaster child with its own cluster in a fresh temporary directory
// TMP (TMP/data the cluster, TMP the Unix socket directory, TMP/postgres.log its log), made by
//   initdb -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync
// and started as
//   postgres -D TMP/data -c listen_addresses=127.0.0.1 -c port=P -c unix_socket_directories=TMP
//            -c fsync=off -c synchronous_commit=off -c full_page_writes=off
//            -c shared_buffers=16MB -c max_connections=200 [-c options.extra_settings...]
// on a free loopback port. On the first start the superuser `postgres` gets
// options.superuser_password, and the test role (LOGIN PASSWORD options.password) and its database
// (OWNER the test role) are created through the trusted Unix socket. Over TCP every login needs
// its password (SCRAM), so a test can check that a wrong password is rejected.
//
// Binaries: initdb and postgres from $FENCELOCK_PG_BINDIR, else /usr/lib/postgresql/15/bin; psql
// from PATH, else that directory. initdb and postgres refuse to run as root: when the test runs
// as root they run as the `postgres` OS user (through `setpriv`, which execs in place, so the
// postmaster stays this process's child), TMP is chown'ed to that user, and every directory above
// TMP must be searchable by it (the default /tmp is; a TMPDIR under /root is not).
//
// The postmaster gets SIGQUIT (immediate shutdown: it stops its backends and releases its shared
// memory) when the thread that started it exits (PR_SET_PDEATHSIG): create servers on the test's
// main thread (SetUp, SetUpTestSuite, a fixture), and call restart()/start_again() there too. The
// temporary directory of a test binary killed that way stays behind, as RedisServer's does.
//
// Several servers may run at once, in one process or in test binaries run in parallel: each has
// its own directory and port (a start that loses its port to another process retries on a new one).
//
// The first start() of a user runs initdb (about 1 s) and leaves the new cluster as a template
// ($TMPDIR or /tmp: fencelock-pg-template-EUID-HASH, kept for later runs; delete it at will);
// later starts copy it (0.1-0.3 s), so start() takes well under 1 s, as does restart().
//
// Failures throw std::runtime_error with a message that says what to do (e.g. install
// postgresql) and includes the tail of the server's log or psql's stderr.
//
// Thread-safety: sql() and sql_as_user() each run a separate psql and may be called from several
// threads at once; stop(), start_again() and restart() must not race with each other, with sql*()
// or with destruction.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/process.h"

namespace fencelock::testing {

struct PostgresServerOptions {
  std::string user = "fencelock";              // the test role (LOGIN, not superuser)
  std::string password = "fencelock-test-pw";  // its password (SCRAM over TCP)
  std::string database = "fencelock";          // owned by `user`
  std::string superuser_password = "fencelock-superuser-pw";  // of `postgres`, for TCP logins
  // More server settings as "name=value", each passed as `-c name=value` after the ones above
  // (so they override them), e.g. "max_locks_per_transaction=256". Empty = none.
  std::vector<std::string> extra_settings;
};

class PostgresServer {
 public:
  // initdb (at most 120 s), start, create the role and database, and wait until the test role
  // can log in over TCP with its password (at most 30 s from the first launch). Throws
  // std::runtime_error if a binary or the `postgres` OS user (when root) is missing, initdb fails,
  // the server exits or is not ready in time; std::invalid_argument if options.user is "postgres"
  // or a name is empty.
  static std::unique_ptr<PostgresServer> start(PostgresServerOptions options = {});
  // A streaming hot standby of `primary` (pg_basebackup -R over primary's Unix socket, as the
  // superuser) in a directory and on a port of its own, with primary's options; waits until it
  // accepts read-only logins of the test role. Whether the primary waits for it is primary's
  // synchronous_standby_names. Throws std::runtime_error like start().
  static std::unique_ptr<PostgresServer> start_standby(PostgresServer& primary);
  // A standby leaves recovery and becomes a primary (pg_promote, waiting at most 30 s).
  void promote();

  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;
  // Immediate shutdown (SIGQUIT; SIGKILL after 10 s), reap, remove the temporary directory.
  // Never throws.
  ~PostgresServer();

  std::uint16_t port() const { return port_; }
  // "postgres://USER:PASSWORD@127.0.0.1:PORT/DATABASE" (percent-encoded) for the test role.
  std::string uri() const;
  // "postgres://USER@127.0.0.1:PORT/DATABASE": the same without the password.
  std::string uri_without_password() const;
  // "postgres://postgres:SUPERUSER_PASSWORD@127.0.0.1:PORT/DATABASE": the superuser over TCP,
  // connected to the test database (for DDL as a privileged user, pg_terminate_backend, ...).
  std::string superuser_uri() const;
  const PostgresServerOptions& options() const { return options_; }
  const std::string& directory() const { return dir_; }  // TMP; also the Unix socket directory
  std::string data_directory() const;                    // TMP/data
  std::string log_path() const;                          // TMP/postgres.log, all starts appended
  pid_t pid() const;  // of the current (or last) postmaster; -1 if none
  bool alive();       // the postmaster is running (reaps it if it exited)

  // Fast shutdown (SIGINT: open transactions are rolled back, clients get
  // "terminating connection due to administrator command"), waits for the postmaster to exit
  // (SIGKILL after 30 s). The port number is kept for start_again() but not held open. No-op if
  // not running.
  void stop();
  // Immediate shutdown (SIGQUIT: backends are killed, no checkpoint), as a crash: the next
  // start_again() recovers from the WAL, and commits whose WAL was not flushed are lost. No-op if
  // not running.
  void crash();
  // Starts the same cluster (data kept) on the same port and waits until the test role can log in
  // over TCP (at most 30 s). Throws std::logic_error if running, std::runtime_error like start()
  // (also when another process took the port in between).
  void start_again();
  // stop() then start_again().
  void restart();
  // SIGSTOP / SIGCONT of the postmaster and every process it started (each session's backend):
  // a stopped server keeps its connections open (the kernel still accepts them and their
  // bytes) but answers nothing.
  void pause();
  void resume();

  // Runs `statement` with psql as the superuser over the Unix socket (trust, no password) in the
  // test database: `psql -X -w -q -At -v ON_ERROR_STOP=1 -c STATEMENT`. Returns psql's stdout
  // without its final newline: rows one a line, columns joined by '|', "" for statements without
  // rows. Several statements in one string run as one transaction and only the last one's rows
  // are printed (so CREATE DATABASE, VACUUM and the like need a call of their own). Throws
  // std::runtime_error with psql's stderr (e.g. "ERROR:  relation ... does not exist") on failure.
  // psql's session has application_name 'fencelock-test-psql' (to leave it out of counts on
  // pg_stat_activity).
  std::string sql(const std::string& statement);
  // The same as the test role over TCP with its password (to check what that role may do).
  std::string sql_as_user(const std::string& statement);

  // The last `lines` lines of the server log, for failure messages.
  std::string log_tail(int lines = 20) const;

 private:
  struct Programs {
    std::string initdb;
    std::string postgres;
    std::string psql;
    std::string setpriv;
  };

  PostgresServer(PostgresServerOptions options, Programs programs, std::string dir);
  // initdb into TMP/data, or a copy of the template cluster an earlier initdb left (initdb()).
  void initdb();
  std::vector<std::string> initdb_args() const;
  std::string cluster_template_path() const;  // "" when initdb cannot be stat'ed
  // Runs `command` as the server's OS user (at most 120 s); throws with `what` on failure.
  void run_as_server_user(std::vector<std::string> command, const std::string& what);
  // TMP owned by the server's OS user when running as root, and short enough for its socket.
  void prepare_directory();
  void base_backup_of(const PostgresServer& primary);
  void launch();  // spawns the postmaster on port_
  // launch() on a free port until the postmaster is ready, with fresh ports while another
  // process takes ours.
  void launch_on_a_free_port(std::chrono::steady_clock::time_point deadline);
  // Throw std::runtime_error when the postmaster exits or `deadline` passes first.
  void wait_for_postmaster(std::chrono::steady_clock::time_point deadline);
  void wait_for_login(std::chrono::steady_clock::time_point deadline);
  bool postmaster_ready() const;  // its postmaster.pid says "ready"
  void create_roles();
  std::vector<std::string> server_args() const;
  std::vector<std::string> as_server_user(bool with_pdeathsig) const;
  RunResult run_psql(const std::string& conninfo, const std::vector<std::string>& statements,
                     const std::string& password, std::chrono::milliseconds timeout) const;
  std::string checked_psql(const std::string& who, const std::string& conninfo,
                           const std::vector<std::string>& statements,
                           const std::string& password) const;
  std::string socket_conninfo(const std::string& database) const;
  std::string tcp_conninfo() const;
  std::string log_since_launch() const;
  void destroy() noexcept;

  PostgresServerOptions options_;
  Programs programs_;
  std::string dir_;
  bool as_root_ = false;  // initdb and postgres run as the `postgres` OS user
  std::uint16_t port_ = 0;
  std::uintmax_t log_offset_ = 0;        // size of the log when the current postmaster started
  std::optional<ChildProcess> process_;  // empty before the first launch
  std::string pg_basebackup_;            // for start_standby()
};

}  // namespace fencelock::testing
