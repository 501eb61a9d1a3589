// A real PgBouncer in front of a PostgresServer, for integration tests.
//
// PgBouncer::start(server) writes TMP/pgbouncer.ini and TMP/users.txt (the test role and the
// superuser with their passwords, SCRAM for clients; PgBouncer logs in to the server with them)
// in a fresh temporary directory TMP and starts Debian's `pgbouncer` (from PATH, else
// /usr/sbin/pgbouncer) on a free loopback port with one database, the server's test database:
//   [databases] DATABASE = host=127.0.0.1 port=SERVER_PORT dbname=DATABASE
//   [pgbouncer] listen_addr=127.0.0.1 listen_port=P unix_socket_dir= auth_type=scram-sha-256
//               pool_mode=options.pool_mode default_pool_size=20 max_client_conn=200
//               [options.extra_settings...]
// Its log goes to TMP/pgbouncer.log. pool_mode `transaction` (the default) hands each
// transaction to whichever server connection is free; `session` keeps one server connection per
// client connection (and runs DISCARD ALL when the client leaves), for a control case.
//
// Like PostgresServer: pgbouncer refuses to run as root, so as root it runs as the `postgres` OS
// user (setpriv, which execs in place); it gets SIGKILL when the thread that started it exits
// (create it on the test's main thread); failures throw std::runtime_error with the log's tail.
//
// Thread-safety: none; use one object from one thread (the server's rules apply to `server`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/postgres_server.h"
#include "support/process.h"

namespace fencelock::testing {

struct PgBouncerOptions {
  std::string pool_mode = "transaction";  // transaction, session or statement
  // More "name = value" lines for the [pgbouncer] section, after the ones above (so they win),
  // e.g. "server_round_robin = 1".
  std::vector<std::string> extra_settings;
};

class PgBouncer {
 public:
  // Writes the configuration, starts pgbouncer and waits (at most 30 s) until the test role can
  // run a query through it. Throws std::runtime_error if pgbouncer is missing (install the Debian
  // package pgbouncer: scripts/deps.sh), exits, or is not ready in time.
  static std::unique_ptr<PgBouncer> start(const PostgresServer& server,
                                          PgBouncerOptions options = {});
  PgBouncer(const PgBouncer&) = delete;
  PgBouncer& operator=(const PgBouncer&) = delete;
  // SIGKILL, reap, remove the temporary directory. Never throws.
  ~PgBouncer();

  std::uint16_t port() const { return port_; }
  // "postgres://USER:PASSWORD@127.0.0.1:PORT/DATABASE" for the server's test role, through
  // PgBouncer.
  std::string uri() const;
  std::string log_tail(int lines = 20) const;

 private:
  PgBouncer(const PostgresServer& server, PgBouncerOptions options, std::string dir);
  void write_files() const;
  void launch();
  // True once a login through it works; throws when pgbouncer exited.
  bool accepts_logins();

  PostgresServerOptions server_options_;
  std::uint16_t server_port_;
  PgBouncerOptions options_;
  std::string dir_;
  std::string program_;
  std::uint16_t port_ = 0;
  std::optional<ChildProcess> process_;
};

}  // namespace fencelock::testing
