#include "redis/connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "core/errno_text.h"
#include "core/log_internal.h"
#include "core/mutex.h"

namespace fencelock::detail::redis {
namespace {

timeval to_timeval(milliseconds d) {
  d = std::max(d, milliseconds(1));
  return timeval{static_cast<time_t>(d.count() / 1000),
                 static_cast<suseconds_t>((d.count() % 1000) * 1000)};
}

// Runs one command synchronously on a fresh context (connection setup only).
Status setup_command(redisContext* c, const std::vector<std::string>& args,
                     std::string_view where) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (!reply) {
    return Status(Code::kUnavailable,
                  fmt::format("{}: {}", where, c->errstr[0] ? c->errstr : "no reply"));
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return status_from_error_reply(std::string_view(reply->str, reply->len), where);
  }
  return Status::Ok();
}

}  // namespace

std::string format_command(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* out = nullptr;
  int len = redisFormatCommandArgv(&out, static_cast<int>(argv.size()), argv.data(), lens.data());
  std::string command(out, static_cast<std::size_t>(len));
  redisFreeCommand(out);
  return command;
}

Status status_from_error_reply(std::string_view text, std::string_view where) {
  auto starts = [&](std::string_view p) { return text.substr(0, p.size()) == p; };
  auto has = [&](std::string_view p) { return text.find(p) != std::string_view::npos; };
  // Redis 6+: "ERR AUTH <password> called without any password configured for the default
  // user"; before 6: "ERR Client sent AUTH, but no password is set".
  if ((starts("ERR AUTH") && has("without any password configured")) ||
      starts("ERR Client sent AUTH, but no password is set")) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{} has no password set, but a password was given (in the URI or "
                              "FENCELOCK_REDIS_PASSWORD): remove it, or set one on the server "
                              "(requirepass, or an ACL user)",
                              where));
  }
  if (starts("ERR DB index is out of range") || starts("ERR invalid DB index")) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: the database number in the URI (/N) is out of range for this "
                              "server ({}); use one below its `databases` setting (16 by default)",
                              where, text));
  }
  if (starts("WRONGPASS") || starts("NOAUTH") || starts("ERR invalid password") ||
      starts("ERR AUTH") || starts("ERR Client sent AUTH")) {
    return Status(Code::kUnauthenticated,
                  fmt::format("{} refused the credentials ({}); check the user and password in the "
                              "URI or FENCELOCK_REDIS_PASSWORD",
                              where, text.substr(0, text.find(' '))));
  }
  if (starts("NOPERM")) {
    return Status(Code::kPermissionDenied,
                  fmt::format("{}: the user lacks a needed permission: {}", where, text));
  }
  if (starts("LOADING") || starts("BUSY") || starts("MASTERDOWN") || starts("TRYAGAIN") ||
      starts("NOSCRIPT")) {
    return Status(Code::kUnavailable, fmt::format("{}: {}", where, text));
  }
  if (starts("READONLY")) {
    return Status(
        Code::kUnavailable,
        fmt::format("{} is a read-only replica ({}); name the master in the URI", where, text));
  }
  if (starts("WRONGTYPE")) {
    return Status(Code::kUnavailable,
                  fmt::format("{}: a key of this lock holds a value of another type ({}): someone "
                              "else wrote it; delete the lock's keys (fencelock:{{NAME}}*) on that "
                              "instance once nobody holds it",
                              where, text));
  }
  // An error raised by one of fencelock's own scripts (a counter or fence record that is not
  // what fencelock writes): its text says what is wrong and how to repair it.
  if (const auto at = text.find("fencelock: "); at != std::string_view::npos) {
    return Status(Code::kUnavailable, fmt::format("{}: {}", where, text.substr(at + 11)));
  }
  if (starts("OOM")) {
    return Status(Code::kUnavailable,
                  fmt::format("{} is out of memory and refuses writes ({}); raise maxmemory or "
                              "free memory",
                              where, text));
  }
  return Status(Code::kInternal, fmt::format("{}: unexpected error reply: {}", where, text));
}

Status check_eviction_policy(redisContext* context, std::string_view where, bool allow_eviction) {
  Reply reply(static_cast<redisReply*>(redisCommand(context, "CONFIG GET maxmemory-policy")));
  if (!reply) {
    return Status(Code::kUnavailable,
                  fmt::format("{}: {}", where, context->errstr[0] ? context->errstr : "no reply"));
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    const std::string_view text(reply->str, reply->len);
    detail::log(LogLevel::kWarning,
                "could not check maxmemory-policy on Redis {} ({}): if it evicts keys without a "
                "TTL, fencing counters can be evicted and tokens repeat; run it with "
                "maxmemory-policy noeviction or volatile-*",
                where, text.substr(0, text.find(' ')));
    return Status::Ok();
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
      reply->element[1]->type != REDIS_REPLY_STRING) {
    return Status::Ok();  // a server without the setting evicts nothing
  }
  const std::string policy(reply->element[1]->str, reply->element[1]->len);
  if (policy.starts_with("allkeys-") && !allow_eviction) {
    return Status(Code::kInvalidArgument,
                  fmt::format("Redis {} runs with maxmemory-policy {}, which can evict fencing "
                              "counters and fence records (they carry no TTL) so that tokens "
                              "repeat; set maxmemory-policy noeviction (or a volatile-* policy), "
                              "or accept the risk with the URI option allow_eviction=true",
                              where, policy));
  }
  return Status::Ok();
}

Result<std::vector<ConnectSpec>> connect_specs(const ParsedUri& uri, milliseconds connect_timeout) {
  int db = 0;
  if (!uri.path.empty()) {
    auto [end, ec] = std::from_chars(uri.path.data(), uri.path.data() + uri.path.size(), db);
    if (ec != std::errc() || end != uri.path.data() + uri.path.size() || db < 0) {
      return Status(
          Code::kInvalidArgument,
          fmt::format("malformed backend URI: database '{}' is not a number >= 0", uri.path));
    }
  }
  ConnectSpec base;
  base.user = uri.user;
  base.password = uri.password;
  base.has_password = uri.has_password;
  if (!base.has_password) {
    if (const char* env = std::getenv("FENCELOCK_REDIS_PASSWORD"); env != nullptr) {
      base.password = env;
      base.has_password = true;
    }
  }
  if (base.user.empty()) {
    if (const char* env = std::getenv("FENCELOCK_REDIS_USER"); env != nullptr) base.user = env;
  }
  base.db = db;
  base.connect_timeout = connect_timeout;
  std::vector<ConnectSpec> specs;
  for (const auto& endpoint : uri.endpoints) {
    ConnectSpec spec = base;
    spec.endpoint = endpoint;
    specs.push_back(std::move(spec));
  }
  return specs;
}

Result<ContextPtr> open_context(const ConnectSpec& spec, Clock::time_point deadline) {
  std::string where = endpoint_text(spec.endpoint);
  auto budget =
      std::min(spec.connect_timeout, std::chrono::ceil<milliseconds>(deadline - Clock::now()));
  if (budget <= milliseconds(0)) {
    return Status(Code::kDeadlineExceeded, fmt::format("{}: no time left to connect", where));
  }
  ContextPtr c(
      redisConnectWithTimeout(spec.endpoint.host.c_str(), spec.endpoint.port, to_timeval(budget)));
  if (!c) return Status(Code::kInternal, "out of memory allocating a Redis context");
  if (c->err) {
    return Status(Code::kUnavailable,
                  fmt::format("cannot connect to Redis at {}: {}", where, c->errstr));
  }
  redisSetTimeout(c.get(), to_timeval(budget));  // setup commands only; fan_out uses poll()
  if (spec.has_password) {
    std::vector<std::string> auth = {"AUTH"};
    if (!spec.user.empty()) auth.push_back(spec.user);
    auth.push_back(spec.password);
    if (Status st = setup_command(c.get(), auth, where); !st.ok()) return st;
  }
  if (spec.db != 0) {
    if (Status st = setup_command(c.get(), {"SELECT", std::to_string(spec.db)}, where); !st.ok())
      return st;
  }
  if (Status st = setup_command(c.get(), {"PING"}, where); !st.ok()) return st;
  for (std::string_view script : spec.scripts) {
    if (Status st = setup_command(c.get(), {"SCRIPT", "LOAD", std::string(script)}, where);
        !st.ok()) {
      return st;
    }
  }
  return c;
}

Result<ContextPtr> Instance::checkout(Clock::time_point deadline) {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      ContextPtr c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    if (Status refused = backoff_.refusal(Clock::now()); !refused.ok()) return refused;
  }
  auto opened = open_context(spec_, deadline);
  MutexLock lock(mu_);
  if (opened.ok()) {
    backoff_.connected();
    reconnects_.connected();
    return opened;
  }
  if (backoff_.failed(opened.status(), Clock::now())) reconnects_.failed();
  return opened;
}

std::optional<ContextPtr> Instance::checkout_idle() {
  MutexLock lock(mu_);
  if (idle_.empty()) return std::nullopt;
  ContextPtr c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void Instance::connect_in_background() {
  MutexLock lock(mu_);
  if (connecting_ || !backoff_.refusal(Clock::now()).ok()) return;
  connecting_ = true;
  if (connector_.joinable()) connector_.join();  // the previous one has finished
  connector_ = std::jthread([this] {
    auto opened = open_context(spec_, Clock::now() + spec_.connect_timeout);
    MutexLock done(mu_);
    connecting_ = false;
    if (opened.ok()) {
      backoff_.connected();
      reconnects_.connected();
      idle_.push_back(std::move(*opened));
      return;
    }
    if (backoff_.failed(opened.status(), Clock::now())) reconnects_.failed();
  });
}

void Instance::checkin(ContextPtr context) {
  constexpr std::size_t kMaxIdle = 32;
  MutexLock lock(mu_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(context));
}

void Instance::note_failure() {
  MutexLock lock(mu_);
  idle_.clear();  // the server probably went away: drop connections that would fail the same way
  reconnects_.failed();
}

std::string Instance::address() const { return endpoint_text(spec_.endpoint); }

void Instance::drop_idle() {
  MutexLock lock(mu_);
  idle_.clear();
}

namespace {

// Closes a connection whose replies the caller gave up on with a reset (SO_LINGER 0): the
// kernel drops what it had not sent yet and stops retransmitting, so no command of it reaches
// the server after a partition heals. What the server already received may still run (the
// tombstones of release.lua cover that).
void abort_connection(ContextPtr context) {
  if (!context) return;
  if (context->fd >= 0) {
    const linger abort{1, 0};
    (void)::setsockopt(context->fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  }
  context.reset();
}

bool is_noscript(const Reply& reply) {
  return reply && reply->type == REDIS_REPLY_ERROR && reply->str != nullptr &&
         std::string_view(reply->str, reply->len).starts_with("NOSCRIPT");
}

// One pass of fan_out (below).
void fan_out_once(std::vector<InstanceCall>& calls, Clock::time_point deadline,
                  const PipelineLimits& limits) {
  const bool stalls = limits.stall > Clock::duration::zero();
  std::vector<ContextPtr> contexts(calls.size());
  // When each instance last made progress: reading began, or a reply came.
  std::vector<Clock::time_point> progress(calls.size());
  // 1. Write every command to every instance before reading anything. An instance without an
  // idle connection is connected in the background when the others are enough without it (a
  // connect to a stopped server must not hold up the round), else here, one after the other.
  std::vector<std::optional<ContextPtr>> idle(calls.size());
  std::size_t have_idle = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].commands.empty()) continue;  // nothing for this instance
    idle[i] = calls[i].instance->checkout_idle();
    if (idle[i]) have_idle++;
  }
  const bool connect_later =
      limits.enough > 0 && limits.enough < calls.size() && have_idle >= limits.enough;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    InstanceCall& call = calls[i];
    call.replies.clear();
    call.error = Status::Ok();
    call.sent = false;
    if (call.commands.empty()) continue;
    if (!idle[i] && connect_later) {
      call.instance->connect_in_background();
      call.error = Status(Code::kUnavailable,
                          fmt::format("Redis at {}: reconnecting", call.instance->address()));
      continue;
    }
    auto checked_out =
        idle[i] ? Result<ContextPtr>(std::move(*idle[i]))
                : call.instance->checkout(stalls ? std::min(deadline, Clock::now() + limits.stall)
                                                 : deadline);
    if (!checked_out.ok()) {
      call.error = checked_out.status();
      continue;
    }
    redisContext* c = checked_out->get();
    for (const std::string* cmd : call.commands)
      redisAppendFormattedCommand(c, cmd->data(), cmd->size());
    call.sent = true;  // from here on, some of it may reach the server
    int done = 0;
    while (!done) {
      if (redisBufferWrite(c, &done) == REDIS_ERR) break;
    }
    if (!done) {
      call.error = Status(Code::kUnavailable, fmt::format("lost connection to Redis at {}: {}",
                                                          call.instance->address(), c->errstr));
      call.instance->note_failure();
      continue;
    }
    contexts[i] = std::move(*checked_out);
  }
  // Stall clocks start together, once every instance has its commands (writes and connects to
  // the others took their time).
  const Clock::time_point started = Clock::now();
  std::fill(progress.begin(), progress.end(), started);
  auto answered = [&](std::size_t i) {
    return calls[i].error.ok() && calls[i].replies.size() == calls[i].commands.size();
  };
  // Whether limits.enough instances have answered everything.
  auto enough_answered = [&] {
    if (limits.enough == 0) return false;
    std::size_t complete = 0;
    for (std::size_t i = 0; i < calls.size(); ++i) complete += answered(i) ? 1 : 0;
    return complete >= limits.enough;
  };
  // When limits.enough instances had first answered everything.
  std::optional<Clock::time_point> enough_at;
  auto note_enough = [&] {
    if (!enough_at && enough_answered()) enough_at = Clock::now();
  };
  auto deadline_of = [&](std::size_t i) {
    Clock::time_point due = stalls ? std::min(deadline, progress[i] + limits.stall) : deadline;
    if (!enough_at) return due;
    due = std::min(due, limits.enough_by);
    if (limits.grace != Clock::duration::max()) {
      due = std::min(due, *enough_at + std::max(limits.grace, *enough_at - started));
    }
    return due;
  };
  // 2. Collect replies from whichever instance has data, under one deadline.
  auto drain = [&](std::size_t i) {
    while (calls[i].replies.size() < calls[i].commands.size()) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(contexts[i].get(), &raw) == REDIS_ERR) return false;
      if (raw == nullptr) return true;
      calls[i].replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return true;
  };
  auto fail = [&](std::size_t i, Status st) {
    calls[i].error = std::move(st);
    abort_connection(std::move(contexts[i]));  // a half-read connection can never be reused
  };
  std::vector<pollfd> fds;
  std::vector<std::size_t> owners;
  while (true) {
    fds.clear();
    owners.clear();
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (contexts[i] && calls[i].replies.size() < calls[i].commands.size()) {
        fds.push_back(pollfd{contexts[i]->fd, POLLIN, 0});
        owners.push_back(i);
      }
    }
    if (fds.empty()) break;
    Clock::time_point first_due = Clock::time_point::max();
    note_enough();
    for (std::size_t i : owners) first_due = std::min(first_due, deadline_of(i));
    auto left =
        std::max(std::chrono::ceil<milliseconds>(first_due - Clock::now()), milliseconds(0));
    int ready = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) {
      for (std::size_t i : owners) fail(i, Status(Code::kInternal, detail::errno_text(errno)));
      break;
    }
    for (std::size_t k = 0; k < fds.size() && ready > 0; ++k) {
      if (fds[k].revents == 0) continue;
      std::size_t i = owners[k];
      progress[i] = Clock::now();
      if (redisBufferRead(contexts[i].get()) == REDIS_ERR || !drain(i)) {
        fail(i, Status(Code::kUnavailable,
                       fmt::format("lost connection to Redis at {}: {}",
                                   calls[i].instance->address(), contexts[i]->errstr)));
        calls[i].instance->note_failure();
      }
    }
    // Whoever is still due and out of time fails, after what had arrived was read.
    note_enough();
    for (std::size_t i : owners) {
      if (contexts[i] && !answered(i) && deadline_of(i) <= Clock::now()) {
        fail(i, Status(Code::kDeadlineExceeded, fmt::format("Redis at {} did not answer in time",
                                                            calls[i].instance->address())));
      }
    }
  }
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (contexts[i]) calls[i].instance->checkin(std::move(contexts[i]));
  }
}

}  // namespace

void fan_out(std::vector<InstanceCall>& calls, Clock::time_point deadline,
             const PipelineLimits& limits) {
  fan_out_once(calls, deadline, limits);
  // A script cache that was flushed (SCRIPT FLUSH, or a server restarted behind a connection
  // that stayed open) answers NOSCRIPT: that command did not run. The instance's idle
  // connections are dropped, and the commands that got NOSCRIPT are sent once more, within the
  // same deadline, on a new connection (which loads every script first: open_context).
  std::vector<InstanceCall> again;
  std::vector<std::size_t> owner;
  std::vector<std::vector<std::size_t>> positions;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::vector<std::size_t> flushed;
    for (std::size_t c = 0; c < calls[i].replies.size(); ++c) {
      if (is_noscript(calls[i].replies[c])) flushed.push_back(c);
    }
    if (flushed.empty()) continue;
    calls[i].instance->drop_idle();
    InstanceCall& call = again.emplace_back();
    call.instance = calls[i].instance;
    for (std::size_t c : flushed) call.commands.push_back(calls[i].commands[c]);
    owner.push_back(i);
    positions.push_back(std::move(flushed));
  }
  if (again.empty() || Clock::now() >= deadline) return;
  PipelineLimits retry = limits;
  retry.enough = 0;  // only these instances: whoever is here must answer
  fan_out_once(again, deadline, retry);
  for (std::size_t j = 0; j < again.size(); ++j) {
    InstanceCall& original = calls[owner[j]];
    for (std::size_t k = 0; k < again[j].replies.size(); ++k) {
      original.replies[positions[j][k]] = std::move(again[j].replies[k]);
    }
  }
}

}  // namespace fencelock::detail::redis
