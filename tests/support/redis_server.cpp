#include "support/redis_server.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <deque>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace fencelock::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReadyTimeout = std::chrono::seconds(10);
constexpr int kStartAttempts = 5;  // fresh ports tried when another process grabbed ours

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(std::chrono::milliseconds d) {
  return timeval{static_cast<time_t>(d.count() / 1000),
                 static_cast<suseconds_t>((d.count() % 1000) * 1000)};
}

// A connection to 127.0.0.1:port, or the reason there is none.
Context connect_loopback(std::uint16_t port, std::chrono::milliseconds timeout,
                         std::string& error) {
  Context c(redisConnectWithTimeout("127.0.0.1", port, to_timeval(timeout)));
  if (!c) {
    error = "out of memory";
    return nullptr;
  }
  if (c->err != 0) {
    error = c->errstr;
    return nullptr;
  }
  redisSetTimeout(c.get(), to_timeval(timeout));
  return c;
}

// Sends one command; nullptr (with `error` set) on an I/O error. Error replies are returned.
Reply send_command(redisContext* c, const std::vector<std::string>& args, std::string& error) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  Reply reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data())));
  if (!reply) error = c->errstr[0] != '\0' ? c->errstr : "connection failed";
  return reply;
}

std::string render(const redisReply& reply) {
  switch (reply.type) {
    case REDIS_REPLY_INTEGER:
      return std::to_string(reply.integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (std::size_t i = 0; i < reply.elements; ++i) {
        if (i > 0) out += '\n';
        out += render(*reply.element[i]);
      }
      return out;
    }
    default:  // string, status, error (and RESP3 scalars in newer hiredis)
      return reply.str != nullptr ? std::string(reply.str, reply.len) : std::string();
  }
}

// "USER:PASS@", ":PASS@" or "" for the credentials the helpers use.
std::string userinfo(const RedisServerOptions& o) {
  if (!o.acl_user.empty()) {
    return fmt::format("{}:{}@", percent_encode(o.acl_user), percent_encode(o.acl_password));
  }
  if (!o.password.empty()) return fmt::format(":{}@", percent_encode(o.password));
  return "";
}

std::vector<std::string> auth_command(const RedisServerOptions& o) {
  if (!o.acl_user.empty()) return {"AUTH", o.acl_user, o.acl_password};
  if (!o.password.empty()) return {"AUTH", o.password};
  return {};
}

// A connection authenticated as the header describes; throws std::runtime_error if impossible.
Context open_session(std::uint16_t port, const RedisServerOptions& options) {
  std::string error;
  auto c = connect_loopback(port, std::chrono::seconds(5), error);
  if (!c) throw std::runtime_error(fmt::format("cannot connect to 127.0.0.1:{}: {}", port, error));
  auto auth = auth_command(options);
  if (auth.empty()) return c;
  Reply reply = send_command(c.get(), auth, error);
  if (!reply || reply->type == REDIS_REPLY_ERROR) {
    throw std::runtime_error(
        fmt::format("AUTH at 127.0.0.1:{} failed: {}", port, reply ? render(*reply) : error));
  }
  return c;
}

std::string find_redis_server() {
  if (auto path = find_executable("redis-server")) return *path;
  if (auto path = find_executable("/usr/bin/redis-server")) return *path;
  throw std::runtime_error(
      "redis-server not found in PATH or /usr/bin: install it (scripts/deps.sh installs the "
      "Debian package redis-server)");
}

}  // namespace

std::unique_ptr<RedisServer> RedisServer::start(RedisServerOptions options) {
  std::string executable = find_redis_server();
  std::unique_ptr<RedisServer> server(new RedisServer(
      std::move(options), make_temp_dir("fencelock-redis-"), std::move(executable)));
  for (int attempt = 1;; ++attempt) {
    server->port_ = free_loopback_port();
    server->launch();
    try {
      server->wait_until_ready();
      return server;
    } catch (const std::runtime_error&) {
      bool port_taken = server->log_tail(5).find("Address already in use") != std::string::npos;
      if (!port_taken || attempt == kStartAttempts) throw;
    }
  }
}

RedisServer::RedisServer(RedisServerOptions options, std::string dir, std::string executable)
    : options_(std::move(options)), dir_(std::move(dir)), executable_(std::move(executable)) {}

RedisServer::RedisServer(RedisServer&& other) noexcept
    : options_(std::move(other.options_)),
      dir_(std::exchange(other.dir_, {})),
      executable_(std::move(other.executable_)),
      port_(std::exchange(other.port_, 0)),
      process_(std::exchange(other.process_, std::nullopt)) {}

RedisServer& RedisServer::operator=(RedisServer&& other) noexcept {
  if (this != &other) {
    destroy();
    options_ = std::move(other.options_);
    dir_ = std::exchange(other.dir_, {});
    executable_ = std::move(other.executable_);
    port_ = std::exchange(other.port_, 0);
    process_ = std::exchange(other.process_, std::nullopt);
  }
  return *this;
}

RedisServer::~RedisServer() { destroy(); }

void RedisServer::destroy() noexcept {
  process_.reset();  // ~ChildProcess: SIGKILL + reap
  remove_tree(dir_);
  dir_.clear();
}

std::string RedisServer::address() const { return fmt::format("127.0.0.1:{}", port_); }

std::string RedisServer::uri() const { return fmt::format("redis://{}", address()); }

std::string RedisServer::uri_with_credentials() const {
  return fmt::format("redis://{}{}", userinfo(options_), address());
}

std::string RedisServer::log_path() const { return dir_ + "/redis.log"; }

pid_t RedisServer::pid() const { return process_ ? process_->pid() : -1; }

std::vector<std::string> RedisServer::server_args() const {
  std::vector<std::string> args = {executable_,
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--dir",
                                   dir_,
                                   "--daemonize",
                                   "no",
                                   "--protected-mode",
                                   "no",
                                   "--logfile",
                                   log_path()};
  if (options_.appendonly) {
    args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  } else {
    args.insert(args.end(), {"--appendonly", "no"});
  }
  if (!options_.password.empty()) args.insert(args.end(), {"--requirepass", options_.password});
  if (!options_.acl_user.empty()) {
    args.insert(args.end(), {"--user", options_.acl_user, "on", ">" + options_.acl_password, "~*",
                             "&*", "+@all"});
  }
  return args;
}

void RedisServer::launch() {
  SpawnOptions spawn;
  spawn.die_with_parent = true;
  process_.emplace(ChildProcess::spawn_with(server_args(), spawn));
}

void RedisServer::wait_until_ready() {
  const auto deadline = Clock::now() + kReadyTimeout;
  std::string last_error = "no answer yet";
  while (Clock::now() < deadline) {
    if (!process_->running()) {
      throw std::runtime_error(
          fmt::format("redis-server on port {} exited with code {} while starting; log {}:\n{}",
                      port_, process_->wait(), log_path(), log_tail()));
    }
    if (auto c = connect_loopback(port_, std::chrono::milliseconds(200), last_error)) {
      // AUTH's own reply is not checked: with wrong credentials PING answers NOAUTH below.
      auto auth = auth_command(options_);
      if (!auth.empty()) send_command(c.get(), auth, last_error);
      Reply reply = send_command(c.get(), {"PING"}, last_error);
      if (reply && reply->type == REDIS_REPLY_STATUS && render(*reply) == "PONG") return;
      if (reply) last_error = render(*reply);  // e.g. LOADING while an AOF is replayed
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // fine in this test helper
  }
  throw std::runtime_error(
      fmt::format("redis-server on port {} did not answer PING within 10 s "
                  "(last: {}); log {}:\n{}",
                  port_, last_error, log_path(), log_tail()));
}

void RedisServer::kill() {
  if (process_) {
    process_->signal(SIGKILL);
    process_->wait();
  }
}

void RedisServer::restart() {
  kill();
  launch();
  wait_until_ready();
}

void RedisServer::pause() {
  if (process_) process_->signal(SIGSTOP);
}

void RedisServer::resume() {
  if (process_) process_->signal(SIGCONT);
}

bool RedisServer::alive() { return process_ && process_->running(); }

std::string RedisServer::command(const std::vector<std::string>& args) {
  Context c = open_session(port_, options_);
  std::string error;
  Reply reply = send_command(c.get(), args, error);
  if (!reply) {
    throw std::runtime_error(fmt::format("command {} at {} failed: {}",
                                         args.empty() ? "" : args.front(), address(), error));
  }
  return render(*reply);
}

long long RedisServer::command_count(std::string_view command_name) {
  std::string wanted = "cmdstat_";
  for (char ch : command_name) {
    wanted.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  }
  wanted += ":calls=";
  std::string info = command({"INFO", "commandstats"});
  auto at = info.find(wanted);
  while (at != std::string::npos && at != 0 && info[at - 1] != '\n') {
    at = info.find(wanted, at + 1);  // "cmdstat_x" must start a line, not end "cmdstat_y|x"
  }
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + wanted.size()));
}

std::vector<std::string> RedisServer::keys(std::string_view pattern) {
  // SCAN's reply is [cursor, [key...]]; command() would join it with '\n', which keys may
  // contain, so this reads the raw reply.
  Context c = open_session(port_, options_);
  std::set<std::string> found;
  std::string cursor = "0";
  do {
    std::string error;
    Reply reply = send_command(
        c.get(), {"SCAN", cursor, "MATCH", std::string(pattern), "COUNT", "1000"}, error);
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      throw std::runtime_error(
          fmt::format("SCAN at {} failed: {}", address(), reply ? render(*reply) : error));
    }
    cursor = render(*reply->element[0]);
    const redisReply& batch = *reply->element[1];
    for (std::size_t i = 0; i < batch.elements; ++i) {
      found.emplace(batch.element[i]->str, batch.element[i]->len);
    }
  } while (cursor != "0");
  return {found.begin(), found.end()};
}

std::string RedisServer::log_tail(int lines) const { return file_tail(log_path(), lines); }

std::unique_ptr<RedisCluster> RedisCluster::start(int n, const RedisServerOptions& options) {
  if (n < 1) throw std::invalid_argument("RedisCluster::start: n must be at least 1");
  auto cluster = std::make_unique<RedisCluster>();
  for (int i = 0; i < n; ++i) cluster->servers_.push_back(RedisServer::start(options));
  return cluster;
}

RedisServer& RedisCluster::operator[](int i) { return *servers_.at(static_cast<std::size_t>(i)); }

std::string RedisCluster::redlock_uri() const {
  std::string hosts;
  for (const auto& server : servers_) hosts += (hosts.empty() ? "" : ",") + server->address();
  return "redlock://" + hosts;
}

std::string RedisCluster::redlock_uri_with_credentials() const {
  std::string uri = redlock_uri();
  if (servers_.empty()) return uri;
  return "redlock://" + userinfo(servers_.front()->options()) +
         uri.substr(std::string_view("redlock://").size());
}

std::uint64_t clock_floor(RedisServer& server, std::chrono::milliseconds ahead) {
  // TIME renders as "SECONDS\nMICROSECONDS".
  const std::string time = server.command({"TIME"});
  const auto newline = time.find('\n');
  const std::uint64_t ms =
      std::stoull(time.substr(0, newline)) * 1000 + std::stoull(time.substr(newline + 1)) / 1000;
  return (ms + static_cast<std::uint64_t>(ahead.count())) << 20;
}

}  // namespace fencelock::testing
