#include "support/pgbouncer.h"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace fencelock::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReadyTimeout = std::chrono::seconds(30);
constexpr int kStartAttempts = 5;  // fresh ports tried when another process grabbed ours
constexpr const char* kOsUser = "postgres";
constexpr const char* kSuperuser = "postgres";
constexpr const char* kPortTakenMessage = "Address already in use";

[[noreturn]] void throw_errno(const std::string& what, int err = errno) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::generic_category().message(err)));
}

// A double-quoted entry of PgBouncer's auth_file ("" doubles a quote).
std::string auth_file_value(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

void chown_to_os_user(const std::string& path) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwnam_r(kOsUser, &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    throw std::runtime_error(
        "running as root, PgBouncer needs the OS user 'postgres' (pgbouncer refuses root): "
        "install the Debian package postgresql (scripts/deps.sh)");
  }
  if (::chown(path.c_str(), entry.pw_uid, entry.pw_gid) != 0) {
    throw_errno(fmt::format("chown {} to {}", path, kOsUser));
  }
}

}  // namespace

std::unique_ptr<PgBouncer> PgBouncer::start(const PostgresServer& server,
                                            PgBouncerOptions options) {
  std::unique_ptr<PgBouncer> bouncer(
      new PgBouncer(server, std::move(options), make_temp_dir("fencelock-pgbouncer-")));
  auto program = find_executable("pgbouncer");
  if (!program) program = find_executable("/usr/sbin/pgbouncer");
  if (!program) {
    throw std::runtime_error(
        "pgbouncer not found: install the Debian package pgbouncer (scripts/deps.sh does)");
  }
  bouncer->program_ = *program;
  const auto deadline = Clock::now() + kReadyTimeout;
  for (int attempt = 1;; ++attempt) {
    bouncer->port_ = free_loopback_port();
    bouncer->write_files();
    bouncer->launch();
    try {
      while (!bouncer->accepts_logins()) {
        if (Clock::now() >= deadline) {
          throw std::runtime_error(
              fmt::format("pgbouncer on port {} was not ready within {} s:\n{}", bouncer->port_,
                          kReadyTimeout.count(), bouncer->log_tail()));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // fine in this test helper
      }
      return bouncer;
    } catch (const std::runtime_error&) {
      const bool port_taken = bouncer->log_tail(5).find(kPortTakenMessage) != std::string::npos;
      if (!port_taken || attempt == kStartAttempts) throw;
    }
  }
}

PgBouncer::PgBouncer(const PostgresServer& server, PgBouncerOptions options, std::string dir)
    : server_options_(server.options()),
      server_port_(server.port()),
      options_(std::move(options)),
      dir_(std::move(dir)) {}

PgBouncer::~PgBouncer() {
  process_.reset();  // ~ChildProcess: SIGKILL + reap
  remove_tree(dir_);
}

std::string PgBouncer::uri() const {
  return fmt::format("postgres://{}:{}@127.0.0.1:{}/{}", percent_encode(server_options_.user),
                     percent_encode(server_options_.password), port_,
                     percent_encode(server_options_.database));
}

std::string PgBouncer::log_tail(int lines) const {
  return file_tail(dir_ + "/pgbouncer.log", lines);
}

void PgBouncer::write_files() const {
  write_text(dir_ + "/users.txt",
             fmt::format("{} {}\n{} {}\n", auth_file_value(server_options_.user),
                         auth_file_value(server_options_.password), auth_file_value(kSuperuser),
                         auth_file_value(server_options_.superuser_password)));
  std::string ini = fmt::format(
      "[databases]\n"
      "{0} = host=127.0.0.1 port={1} dbname={0}\n"
      "[pgbouncer]\n"
      "listen_addr = 127.0.0.1\n"
      "listen_port = {2}\n"
      "unix_socket_dir =\n"
      "auth_type = scram-sha-256\n"
      "auth_file = {3}/users.txt\n"
      "pool_mode = {4}\n"
      "default_pool_size = 20\n"
      "max_client_conn = 200\n"
      "ignore_startup_parameters = extra_float_digits\n",
      server_options_.database, server_port_, port_, dir_, options_.pool_mode);
  for (const auto& line : options_.extra_settings) ini += line + "\n";
  write_text(dir_ + "/pgbouncer.ini", ini);
  if (::geteuid() == 0) {
    for (const char* name : {"", "/users.txt", "/pgbouncer.ini"}) chown_to_os_user(dir_ + name);
  }
}

void PgBouncer::launch() {
  process_.reset();
  std::vector<std::string> argv;
  auto setpriv = find_executable("setpriv");
  if (::geteuid() == 0) {
    if (!setpriv) {
      throw std::runtime_error(
          "running as root, PgBouncer needs setpriv (util-linux) to run pgbouncer as the OS user "
          "'postgres'");
    }
    argv = {*setpriv, fmt::format("--reuid={}", kOsUser), fmt::format("--regid={}", kOsUser),
            "--init-groups"};
  }
  // A change of user clears PR_SET_PDEATHSIG: setpriv sets it again after the change.
  if (setpriv) {
    if (argv.empty()) argv.push_back(*setpriv);
    argv.insert(argv.end(), {"--pdeathsig", "SIGKILL", "--"});
  }
  argv.insert(argv.end(), {program_, dir_ + "/pgbouncer.ini"});
  const std::string log = dir_ + "/pgbouncer.log";
  int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw_errno("cannot open " + log);
  SpawnOptions spawn;
  spawn.stdout_fd = log_fd;
  spawn.stderr_fd = log_fd;
  spawn.die_with_parent = true;
  try {
    process_.emplace(ChildProcess::spawn_with(argv, spawn));
  } catch (...) {
    ::close(log_fd);
    throw;
  }
  ::close(log_fd);
}

bool PgBouncer::accepts_logins() {
  if (!process_->running()) {
    throw std::runtime_error(fmt::format("pgbouncer on port {} exited with code {}:\n{}", port_,
                                         process_->wait(), log_tail()));
  }
  auto psql = find_executable("psql");
  if (!psql) throw std::runtime_error("psql not found: install postgresql-client");
  RunResult result = run_command(
      {*psql, "-X", "-w", "-q", "-A", "-t", "-d",
       fmt::format("host=127.0.0.1 port={} user={} dbname={} connect_timeout=5", port_,
                   server_options_.user, server_options_.database),
       "-c", "select 1"},
      {"PGPASSWORD=" + server_options_.password, "PGPASSFILE=" + dir_ + "/no-pgpass",
       "PGSSLMODE=disable", "PGGSSENCMODE=disable", "PGSERVICE", "PGOPTIONS", "LC_ALL=C"},
      "", std::chrono::seconds(10));
  return result.exit_code == 0 && result.stdout_text.starts_with("1");
}

}  // namespace fencelock::testing
