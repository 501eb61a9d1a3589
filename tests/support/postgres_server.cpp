#include "support/postgres_server.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace fencelock::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReadyTimeout = std::chrono::seconds(30);
constexpr auto kStopTimeout = std::chrono::seconds(30);     // fast shutdown, then SIGKILL
constexpr auto kDestroyTimeout = std::chrono::seconds(10);  // immediate shutdown, then SIGKILL
constexpr auto kPsqlTimeout = std::chrono::seconds(30);
constexpr auto kLoginAttemptTimeout = std::chrono::milliseconds(5000);
constexpr int kStartAttempts = 5;  // fresh ports tried when another process grabbed ours
constexpr const char* kDefaultBinDir = "/usr/lib/postgresql/15/bin";
constexpr const char* kServerOsUser = "postgres";
constexpr const char* kSuperuser = "postgres";
// What the postmaster logs when it cannot listen on 127.0.0.1:port.
constexpr const char* kPortTakenMessage = "could not create any TCP/IP sockets";

[[noreturn]] void throw_errno(const std::string& what, int err = errno) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::generic_category().message(err)));
}

std::string bin_dir() {
  const char* env = std::getenv("FENCELOCK_PG_BINDIR");
  return env != nullptr && *env != '\0' ? env : kDefaultBinDir;
}

std::string find_in_bin_dir(const std::string& dir, const std::string& name) {
  if (auto path = find_executable(dir + "/" + name)) return *path;
  throw std::runtime_error(fmt::format(
      "{}/{} not found: install PostgreSQL 15 (scripts/deps.sh installs the Debian packages "
      "postgresql and postgresql-client) or set FENCELOCK_PG_BINDIR to its bin directory",
      dir, name));
}

// A value for a libpq "key=value" connection string: single-quoted, \ and ' escaped.
std::string conninfo_value(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\\' || c == '\'') out.push_back('\\');
    out.push_back(c);
  }
  return out + "'";
}

std::string sql_identifier(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

std::string sql_literal(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out.push_back('\'');
    out.push_back(c);
  }
  return out + "'";
}

std::string trim_trailing_newlines(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

// The environment psql runs with: only the connection string given on its command line counts
// (no PGHOST etc. from the test's environment, no ~/.pgpass), no SSL/GSS negotiation, English
// messages, and a recognizable application_name for queries on pg_stat_activity.
std::vector<std::string> psql_environment(const std::string& password, const std::string& dir) {
  std::vector<std::string> env = {"PGHOST",        "PGHOSTADDR",       "PGPORT",
                                  "PGUSER",        "PGDATABASE",       "PGSERVICE",
                                  "PGSERVICEFILE", "PGOPTIONS",        "PGTARGETSESSIONATTRS",
                                  "PGREQUIREAUTH", "PGCHANNELBINDING", "PGCLIENTENCODING",
                                  "PGSYSCONFDIR"};
  env.push_back(password.empty() ? "PGPASSWORD" : "PGPASSWORD=" + password);
  env.push_back("PGPASSFILE=" + dir + "/no-pgpass");
  env.emplace_back("PGSSLMODE=disable");
  env.emplace_back("PGGSSENCMODE=disable");
  env.emplace_back("PGCONNECT_TIMEOUT=10");
  env.emplace_back("PGAPPNAME=fencelock-test-psql");
  env.emplace_back("LC_ALL=C");
  return env;
}

struct OsUser {
  uid_t uid = 0;
  gid_t gid = 0;
};

OsUser lookup_os_user(const char* name) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  int err = ::getpwnam_r(name, &entry, buffer.data(), buffer.size(), &found);
  if (err != 0 || found == nullptr) {
    throw std::runtime_error(fmt::format(
        "running as root, PostgresServer needs the OS user '{}' to run initdb and postgres (they "
        "refuse root), but it does not exist: install the Debian package postgresql "
        "(scripts/deps.sh), which creates it",
        name));
  }
  return OsUser{entry.pw_uid, entry.pw_gid};
}

bool searchable_by(const struct stat& st, const OsUser& user) {
  if (st.st_uid == user.uid) return (st.st_mode & S_IXUSR) != 0;
  if (st.st_gid == user.gid) return (st.st_mode & S_IXGRP) != 0;
  return (st.st_mode & S_IXOTH) != 0;
}

// Throws unless `user` can reach `dir` (every directory above it searchable).
void check_reachable(const std::string& dir, const OsUser& user) {
  namespace fs = std::filesystem;
  for (fs::path p = fs::path(dir).parent_path(); !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && !searchable_by(st, user)) {
      throw std::runtime_error(fmt::format(
          "the OS user '{}' cannot reach {}: {} is not searchable by it; set TMPDIR to a "
          "directory every user can reach (such as /tmp)",
          kServerOsUser, dir, p.string()));
    }
    if (p == p.root_path()) break;
  }
}

void check_socket_path_length(const std::string& dir) {
  // The socket is DIR/.s.PGSQL.PORT; sun_path holds 107 characters and a NUL.
  constexpr std::size_t kSocketNameLength = std::char_traits<char>::length("/.s.PGSQL.65535");
  if (dir.size() + kSocketNameLength >= sizeof(sockaddr_un{}.sun_path)) {
    throw std::runtime_error(fmt::format(
        "the temporary directory {} is too long for a Unix socket path; set TMPDIR to a shorter "
        "directory",
        dir));
  }
}

std::string read_file_from(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(static_cast<std::streamoff>(offset));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string one_line(std::string text) {
  text = trim_trailing_newlines(std::move(text));
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text.empty() ? "(no message)" : text;
}

}  // namespace

std::unique_ptr<PostgresServer> PostgresServer::start(PostgresServerOptions options) {
  if (options.user.empty() || options.database.empty() || options.password.empty() ||
      options.superuser_password.empty()) {
    throw std::invalid_argument(
        "PostgresServer::start: user, password, database and superuser_password must not be "
        "empty");
  }
  if (options.user == kSuperuser) {
    throw std::invalid_argument(
        "PostgresServer::start: the test role must not be the superuser 'postgres'");
  }
  const std::string dir = bin_dir();
  Programs programs;
  programs.initdb = find_in_bin_dir(dir, "initdb");
  programs.postgres = find_in_bin_dir(dir, "postgres");
  auto psql = find_executable("psql");
  programs.psql = psql ? *psql : find_in_bin_dir(dir, "psql");
  auto setpriv = find_executable("setpriv");
  if (!setpriv) setpriv = find_executable("/usr/bin/setpriv");
  if (setpriv) programs.setpriv = *setpriv;

  std::unique_ptr<PostgresServer> server(new PostgresServer(std::move(options), std::move(programs),
                                                            make_temp_dir("fencelock-postgres-")));
  server->initdb();
  const auto deadline = Clock::now() + kReadyTimeout;
  server->launch_on_a_free_port(deadline);
  server->create_roles();
  server->wait_for_login(deadline);
  return server;
}

std::unique_ptr<PostgresServer> PostgresServer::start_standby(PostgresServer& primary) {
  std::unique_ptr<PostgresServer> server(new PostgresServer(
      primary.options_, primary.programs_, make_temp_dir("fencelock-postgres-standby-")));
  server->pg_basebackup_ = find_in_bin_dir(bin_dir(), "pg_basebackup");
  server->base_backup_of(primary);
  const auto deadline = Clock::now() + kReadyTimeout;
  server->launch_on_a_free_port(deadline);
  server->wait_for_login(deadline);  // the roles came with the backup
  return server;
}

void PostgresServer::launch_on_a_free_port(Clock::time_point deadline) {
  for (int attempt = 1;; ++attempt) {
    port_ = free_loopback_port();
    launch();
    try {
      wait_for_postmaster(deadline);
      return;
    } catch (const std::runtime_error&) {
      bool port_taken = log_since_launch().find(kPortTakenMessage) != std::string::npos;
      if (!port_taken || attempt == kStartAttempts) throw;
    }
  }
}

void PostgresServer::prepare_directory() {
  if (as_root_) {
    OsUser user = lookup_os_user(kServerOsUser);
    check_reachable(dir_, user);
    if (::chown(dir_.c_str(), user.uid, user.gid) != 0) {
      throw_errno(fmt::format("chown {} to {}", dir_, kServerOsUser));
    }
  }
  check_socket_path_length(dir_);
}

void PostgresServer::base_backup_of(const PostgresServer& primary) {
  prepare_directory();
  std::vector<std::string> argv = as_server_user(false);
  argv.insert(argv.end(), {pg_basebackup_, "-D", data_directory(), "-h", primary.dir_, "-p",
                           std::to_string(primary.port_), "-U", kSuperuser, "-R", "-X", "stream",
                           "--no-sync", "-c", "fast"});
  RunResult result = run_command(argv, {"PGDATA", "LC_ALL=C"}, "", std::chrono::seconds(120));
  if (result.exit_code != 0) {
    throw std::runtime_error(fmt::format("pg_basebackup of port {} failed (exit code {}):\n{}{}",
                                         primary.port_, result.exit_code, result.stdout_text,
                                         result.stderr_text));
  }
}

void PostgresServer::promote() {
  if (sql("SELECT pg_promote(true, 30)") != "t") {
    throw std::runtime_error(
        fmt::format("pg_promote on port {} did not finish within 30 s:\n{}", port_, log_tail()));
  }
}

PostgresServer::PostgresServer(PostgresServerOptions options, Programs programs, std::string dir)
    : options_(std::move(options)),
      programs_(std::move(programs)),
      dir_(std::move(dir)),
      as_root_(::geteuid() == 0) {}

PostgresServer::~PostgresServer() { destroy(); }

void PostgresServer::destroy() noexcept {
  try {
    if (process_ && process_->running()) {
      process_->signal(SIGQUIT);  // immediate shutdown: stops the backends, frees shared memory
      process_->wait_for(kDestroyTimeout);
    }
  } catch (...) {
    // Nothing to do: ~ChildProcess below kills it.
  }
  process_.reset();  // ~ChildProcess: SIGKILL + reap if still running
  remove_tree(dir_);
  dir_.clear();
}

std::string PostgresServer::uri() const {
  return fmt::format("postgres://{}:{}@127.0.0.1:{}/{}", percent_encode(options_.user),
                     percent_encode(options_.password), port_, percent_encode(options_.database));
}

std::string PostgresServer::uri_without_password() const {
  return fmt::format("postgres://{}@127.0.0.1:{}/{}", percent_encode(options_.user), port_,
                     percent_encode(options_.database));
}

std::string PostgresServer::superuser_uri() const {
  return fmt::format("postgres://{}:{}@127.0.0.1:{}/{}", kSuperuser,
                     percent_encode(options_.superuser_password), port_,
                     percent_encode(options_.database));
}

std::string PostgresServer::data_directory() const { return dir_ + "/data"; }

std::string PostgresServer::log_path() const { return dir_ + "/postgres.log"; }

pid_t PostgresServer::pid() const { return process_ ? process_->pid() : -1; }

bool PostgresServer::alive() { return process_ && process_->running(); }

std::vector<std::string> PostgresServer::as_server_user(bool with_pdeathsig) const {
  std::vector<std::string> prefix;
  if (as_root_) {
    if (programs_.setpriv.empty()) {
      throw std::runtime_error(
          "running as root, PostgresServer needs setpriv (util-linux) to run initdb and postgres "
          "as the OS user 'postgres'");
    }
    prefix = {programs_.setpriv, fmt::format("--reuid={}", kServerOsUser),
              fmt::format("--regid={}", kServerOsUser), "--init-groups"};
  }
  // A change of user clears PR_SET_PDEATHSIG, so setpriv sets it again after the change; its
  // SIGQUIT asks the postmaster for an immediate shutdown, which also stops the backends (they
  // run in sessions of their own, out of reach of a signal to the postmaster's process group).
  if (with_pdeathsig && !programs_.setpriv.empty()) {
    if (prefix.empty()) prefix.push_back(programs_.setpriv);
    prefix.insert(prefix.end(), {"--pdeathsig", "SIGQUIT"});
  }
  if (!prefix.empty()) prefix.emplace_back("--");
  return prefix;
}

std::vector<std::string> PostgresServer::initdb_args() const {
  return {"-U",   kSuperuser,   "--auth-local=trust", "--auth-host=scram-sha-256", "-E",
          "UTF8", "--locale=C", "--no-sync",          "--no-instructions"};
}

std::string PostgresServer::cluster_template_path() const {
  struct stat st {};
  if (::stat(programs_.initdb.c_str(), &st) != 0) return {};
  std::string key = fmt::format("{}|{}|{}", programs_.initdb, st.st_size, st.st_mtim.tv_sec);
  for (const auto& arg : initdb_args()) key += "|" + arg;
  // FNV-1a: stable across builds and runs, unlike std::hash.
  std::uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : key) hash = (hash ^ c) * 1099511628211ULL;
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string base = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  return fmt::format("{}/fencelock-pg-template-{}-{:016x}", base, ::geteuid(), hash);
}

void PostgresServer::run_as_server_user(std::vector<std::string> command, const std::string& what) {
  std::vector<std::string> argv = as_server_user(false);
  argv.insert(argv.end(), command.begin(), command.end());
  RunResult result = run_command(argv, {"PGDATA", "LC_ALL=C"}, "", std::chrono::seconds(120));
  if (result.exit_code != 0) {
    throw std::runtime_error(fmt::format(
        "{} failed (exit code {}{}):\n{}{}", what, result.exit_code,
        result.timed_out ? ", timed out after 120 s" : "", result.stdout_text, result.stderr_text));
  }
}

// initdb costs about a second of CPU, most of a start: the first server of a user (per initdb
// binary and arguments) runs it and leaves a copy of the new cluster beside its own directory
// (TMPDIR or /tmp, "fencelock-pg-template-EUID-HASH", published by an atomic rename, so that
// servers started in parallel see a whole copy or none); every later server copies that with
// `cp -a` (0.1-0.3 s). A template owned by anyone but the server's OS user, or open to others,
// is not used.
void PostgresServer::initdb() {
  prepare_directory();
  const std::string templ = cluster_template_path();
  struct stat st {};
  const uid_t server_uid = as_root_ ? lookup_os_user(kServerOsUser).uid : ::geteuid();
  if (!templ.empty() && ::lstat((templ + "/PG_VERSION").c_str(), &st) == 0 &&
      ::lstat(templ.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == server_uid &&
      (st.st_mode & 077) == 0) {
    run_as_server_user({"cp", "-a", templ, data_directory()},
                       fmt::format("cp -a {} {}", templ, data_directory()));
    return;
  }
  std::vector<std::string> command = {programs_.initdb, "-D", data_directory()};
  for (const auto& arg : initdb_args()) command.push_back(arg);
  run_as_server_user(std::move(command), fmt::format("initdb -D {}", data_directory()));
  if (templ.empty()) return;
  // Publish the template; a failure only costs later servers an initdb of their own.
  const std::string staging = dir_ + "/template";
  try {
    run_as_server_user({"cp", "-a", data_directory(), staging}, "cp -a (cluster template)");
    if (::rename(staging.c_str(), templ.c_str()) != 0) remove_tree(staging);  // another won
  } catch (const std::runtime_error&) {
    remove_tree(staging);
  }
}

std::vector<std::string> PostgresServer::server_args() const {
  std::vector<std::string> args = as_server_user(true);
  args.insert(args.end(),
              {programs_.postgres, "-D", data_directory(), "-c", "listen_addresses=127.0.0.1", "-c",
               fmt::format("port={}", port_), "-c", "unix_socket_directories=" + dir_, "-c",
               "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c",
               "shared_buffers=16MB", "-c", "max_connections=200",
               // Files under the data directory instead of /dev/shm: nothing is left
               // behind in /dev/shm by a postmaster that is killed.
               "-c", "dynamic_shared_memory_type=mmap", "-c", "huge_pages=off"});
  for (const auto& setting : options_.extra_settings) args.insert(args.end(), {"-c", setting});
  return args;
}

void PostgresServer::launch() {
  std::error_code ignored;
  log_offset_ = std::filesystem::file_size(log_path(), ignored);
  if (ignored) log_offset_ = 0;
  // Opened in append mode by this process, so the log keeps every start's messages and needs no
  // write permission for the server's OS user.
  int log_fd = ::open(log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw_errno(fmt::format("cannot open {}", log_path()));
  SpawnOptions spawn;
  spawn.stdout_fd = log_fd;
  spawn.stderr_fd = log_fd;
  spawn.die_with_parent = true;
  spawn.extra_env = {"PGDATA", "PGPORT", "LC_ALL=C"};
  try {
    process_.emplace(ChildProcess::spawn_with(server_args(), spawn));
  } catch (...) {
    ::close(log_fd);
    throw;
  }
  ::close(log_fd);
}

bool PostgresServer::postmaster_ready() const {
  // Lines of postmaster.pid: pid, data directory, start time, port, socket directory, listen
  // address, shared memory key, status ("starting", "stopping", "ready   ", "standby ").
  std::ifstream in(data_directory() + "/postmaster.pid");
  std::vector<std::string> lines;
  for (std::string line; lines.size() < 8 && std::getline(in, line);) lines.push_back(line);
  // A hot standby says "standby" until it accepts connections, then "ready".
  return lines.size() == 8 && lines[0] == std::to_string(process_->pid()) &&
         lines[7].starts_with("ready");
}

void PostgresServer::wait_for_postmaster(Clock::time_point deadline) {
  while (!postmaster_ready()) {
    if (!process_->running()) {
      throw std::runtime_error(
          fmt::format("postgres on port {} exited with code {} while starting; log {}:\n{}", port_,
                      process_->wait(), log_path(), log_tail()));
    }
    if (Clock::now() >= deadline) {
      throw std::runtime_error(
          fmt::format("postgres on port {} was not ready within {} s; log {}:\n{}", port_,
                      kReadyTimeout.count(), log_path(), log_tail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // fine in this test helper
  }
}

void PostgresServer::wait_for_login(Clock::time_point deadline) {
  std::string last_error = "no answer yet";
  while (true) {
    if (!process_->running()) {
      throw std::runtime_error(
          fmt::format("postgres on port {} exited with code {} while starting; log {}:\n{}", port_,
                      process_->wait(), log_path(), log_tail()));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    RunResult result = run_psql(tcp_conninfo(), {"select 1"}, options_.password,
                                std::min(left, kLoginAttemptTimeout));
    if (result.exit_code == 0 && trim_trailing_newlines(result.stdout_text) == "1") return;
    last_error = result.timed_out ? "psql timed out" : one_line(result.stderr_text);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // fine in this test helper
  }
  throw std::runtime_error(
      fmt::format("role '{}' could not log in to postgres at 127.0.0.1:{} with its password "
                  "within {} s (last: {}); log {}:\n{}",
                  options_.user, port_, kReadyTimeout.count(), last_error, log_path(), log_tail()));
}

void PostgresServer::create_roles() {
  const std::string role = sql_identifier(options_.user);
  checked_psql(
      "superuser postgres", socket_conninfo("postgres"),
      {fmt::format("CREATE ROLE {} LOGIN PASSWORD {}", role, sql_literal(options_.password)),
       fmt::format("ALTER ROLE {} PASSWORD {}", sql_identifier(kSuperuser),
                   sql_literal(options_.superuser_password)),
       // Its own statement: CREATE DATABASE cannot run inside a transaction block.
       fmt::format("CREATE DATABASE {} OWNER {}", sql_identifier(options_.database), role)},
      "");
}

std::string PostgresServer::socket_conninfo(const std::string& database) const {
  return fmt::format("host={} port={} user={} dbname={}", conninfo_value(dir_), port_,
                     conninfo_value(kSuperuser), conninfo_value(database));
}

std::string PostgresServer::tcp_conninfo() const {
  return fmt::format("host=127.0.0.1 port={} user={} dbname={}", port_,
                     conninfo_value(options_.user), conninfo_value(options_.database));
}

RunResult PostgresServer::run_psql(const std::string& conninfo,
                                   const std::vector<std::string>& statements,
                                   const std::string& password,
                                   std::chrono::milliseconds timeout) const {
  // -X: no ~/.psqlrc; -w: never prompt for a password (it would read /dev/tty).
  std::vector<std::string> argv = {programs_.psql,    "-X", "-w",    "-q", "-A", "-t", "-v",
                                   "ON_ERROR_STOP=1", "-d", conninfo};
  for (const auto& statement : statements) argv.insert(argv.end(), {"-c", statement});
  return run_command(argv, psql_environment(password, dir_), "", timeout);
}

std::string PostgresServer::checked_psql(const std::string& who, const std::string& conninfo,
                                         const std::vector<std::string>& statements,
                                         const std::string& password) const {
  RunResult result = run_psql(conninfo, statements, password, kPsqlTimeout);
  if (result.exit_code != 0) {
    std::string what;
    for (const auto& statement : statements) what += (what.empty() ? "" : "; ") + statement;
    throw std::runtime_error(
        fmt::format("psql as {} at port {} failed (exit code {}{}) running: {}\n{}", who, port_,
                    result.exit_code, result.timed_out ? ", timed out after 30 s" : "", what,
                    trim_trailing_newlines(result.stderr_text)));
  }
  // psql -At ends each row with '\n'; drop the last so sql("select 1") == "1".
  std::string out = std::move(result.stdout_text);
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string PostgresServer::sql(const std::string& statement) {
  return checked_psql("superuser postgres", socket_conninfo(options_.database), {statement}, "");
}

std::string PostgresServer::sql_as_user(const std::string& statement) {
  return checked_psql(fmt::format("role '{}'", options_.user), tcp_conninfo(), {statement},
                      options_.password);
}

void PostgresServer::stop() {
  if (!alive()) return;
  process_->signal(SIGINT);  // fast shutdown
  if (!process_->wait_for(kStopTimeout)) {
    process_->signal_group(SIGKILL);
    process_->wait();
  }
}

void PostgresServer::crash() {
  if (!alive()) return;
  process_->signal(SIGQUIT);  // immediate shutdown: no checkpoint, WAL recovery on the next start
  if (!process_->wait_for(kStopTimeout)) {
    process_->signal_group(SIGKILL);
    process_->wait();
  }
}

namespace {

// `signal` to `parent` and every process whose parent it is (read from /proc/PID/stat).
void signal_with_children(pid_t parent, int signal) {
  ::kill(parent, signal);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) ::kill(std::stoi(name), signal);
  }
}

}  // namespace

void PostgresServer::pause() {
  if (alive()) signal_with_children(pid(), SIGSTOP);
}

void PostgresServer::resume() {
  if (process_) signal_with_children(pid(), SIGCONT);
}

void PostgresServer::start_again() {
  if (alive()) throw std::logic_error("PostgresServer::start_again: the server is running");
  launch();
  const auto deadline = Clock::now() + kReadyTimeout;
  wait_for_postmaster(deadline);
  wait_for_login(deadline);
}

void PostgresServer::restart() {
  stop();
  start_again();
}

std::string PostgresServer::log_since_launch() const {
  return read_file_from(log_path(), log_offset_);
}

std::string PostgresServer::log_tail(int lines) const { return file_tail(log_path(), lines); }

}  // namespace fencelock::testing
