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
#include "core/saturate.h"
#include "core/thread_name.h"

namespace fencelock::detail::redis {
std::vector<std::string> setup_commands(const ConnectSpec& spec) {
  std::vector<std::string> setup;
  if (spec.has_password) {
    std::vector<std::string> auth = {"AUTH"};
    if (!spec.user.empty()) auth.push_back(spec.user);
    auth.push_back(spec.password);
    setup.push_back(format_command(auth));
  }
  if (spec.db != 0) setup.push_back(format_command({"SELECT", std::to_string(spec.db)}));
  setup.push_back(format_command({"PING"}));
  for (std::string_view script : spec.scripts) {
    setup.push_back(format_command({"SCRIPT", "LOAD", std::string(script)}));
  }
  return setup;
}

// One connection's part of a poll loop (drive, below). A new connection first sends its setup
// commands, and only once every one of them succeeded the call's commands (a failed SELECT must
// not let them run in database 0); a connection from the pool sends the call's commands at once.
class Exchange {
 public:
  enum class Phase { kOpening, kCommands, kDone, kFailed };

  // `setup` empty: `connection` is open and set up. `commands` and `replies` may be null (an
  // open without a call).
  Exchange(ConnectionPtr opened_or_opening, std::vector<std::string> setup,
           const std::vector<const std::string*>* commands, std::vector<Reply>* replies)
      : connection(std::move(opened_or_opening)),
        setup_(std::move(setup)),
        commands_(commands),
        replies_(replies) {
    if (setup_.empty()) {
      send_commands();
    } else {
      phase = Phase::kOpening;
      for (const std::string& command : setup_) connection->queue(command);
    }
  }

  bool active() const { return phase == Phase::kOpening || phase == Phase::kCommands; }

  // What poll() reported for the connection.
  void on_events(short revents) {
    progress = Clock::now();
    // POLLNVAL cannot happen (a Connection's descriptor stays open while it lives); were it to,
    // the write or read below fails on it instead of the loop spinning until the deadline.
    if ((revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) != 0 && connection->wants_write()) {
      if (Status st = connection->on_writable(); !st.ok()) return fail(std::move(st));
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL)) != 0 && !connection->connecting()) {
      // Replies that came before a close are still taken.
      const Status read = connection->on_readable();
      take_replies();
      if (!read.ok() && active()) fail(read);
    }
  }

  // Out of time: fails with kDeadlineExceeded, naming what it was doing.
  void expire() {
    if (!active()) return;
    fail(Status(Code::kDeadlineExceeded,
                fmt::format("Redis at {} did not {} in time", connection->address(),
                            phase == Phase::kOpening ? "finish connecting" : "answer")));
  }

  void fail(Status why) {
    if (!active()) return;
    error = std::move(why);
    failed_opening = phase == Phase::kOpening;
    phase = Phase::kFailed;
  }

  ConnectionPtr connection;
  Phase phase = Phase::kCommands;
  Status error;                               // set when phase is kFailed
  bool failed_opening = false;                // it failed before its setup was done
  bool opened = false;                        // a new connection whose setup succeeded here
  Clock::time_point progress = Clock::now();  // when the connection was last heard from

 private:
  void send_commands() {
    phase = Phase::kCommands;
    const std::size_t count = commands_ ? commands_->size() : 0;
    if (count == 0) {
      phase = Phase::kDone;
      return;
    }
    for (const std::string* command : *commands_) connection->queue(*command);
    // Write at once: the socket usually takes it all, and the next poll then waits for replies.
    if (Status st = connection->on_writable(); !st.ok()) fail(std::move(st));
  }

  void take_replies() {
    while (active()) {
      auto reply = connection->next_reply();
      if (!reply.ok()) return fail(reply.status());
      if (!*reply) return;
      if (phase == Phase::kOpening) {
        const redisReply* r = reply->get();
        if (r->type == REDIS_REPLY_ERROR) {
          return fail(
              status_from_error_reply(std::string_view(r->str, r->len), connection->address()));
        }
        if (++setup_answered_ == setup_.size()) {
          opened = true;
          send_commands();
        }
        continue;
      }
      replies_->push_back(std::move(*reply));
      if (replies_->size() == commands_->size()) phase = Phase::kDone;
    }
  }

  std::vector<std::string> setup_;
  std::size_t setup_answered_ = 0;
  const std::vector<const std::string*>* commands_;
  std::vector<Reply>* replies_;
};

namespace {

// Drives every active exchange from one poll() loop until none is left active. due(i) is when
// exchange i must be done (asked again before each wait and after each event, so it may change);
// one still active then fails with kDeadlineExceeded, after what had arrived was read.
template <typename Due>
void drive(std::vector<Exchange>& exchanges, Due&& due) {
  std::vector<pollfd> fds;
  std::vector<std::size_t> owners;
  while (true) {
    fds.clear();
    owners.clear();
    Clock::time_point first_due = Clock::time_point::max();
    for (std::size_t i = 0; i < exchanges.size(); ++i) {
      if (!exchanges[i].active()) continue;
      fds.push_back(
          pollfd{exchanges[i].connection->fd(), exchanges[i].connection->poll_events(), 0});
      owners.push_back(i);
      first_due = std::min(first_due, due(i));
    }
    if (fds.empty()) return;
    const auto left =
        std::max(std::chrono::ceil<milliseconds>(first_due - Clock::now()), milliseconds(0));
    const int wait = static_cast<int>(std::min<milliseconds::rep>(left.count(), 1 << 30));
    const int ready = ::poll(fds.data(), fds.size(), wait);
    if (ready < 0 && errno != EINTR) {
      for (std::size_t i : owners) {
        exchanges[i].fail(Status(Code::kInternal, detail::errno_text(errno)));
      }
      return;
    }
    for (std::size_t k = 0; k < fds.size() && ready > 0; ++k) {
      if (fds[k].revents != 0) exchanges[owners[k]].on_events(fds[k].revents);
    }
    const Clock::time_point now = Clock::now();
    for (std::size_t i : owners) {
      if (exchanges[i].active() && due(i) <= now) exchanges[i].expire();
    }
  }
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

Status check_eviction_policy(Connection& connection, bool allow_eviction,
                             Clock::time_point deadline) {
  const std::string& where = connection.address();
  auto reply = run_command(connection, {"CONFIG", "GET", "maxmemory-policy"}, deadline);
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    const std::string_view text((*reply)->str, (*reply)->len);
    detail::log(LogLevel::kWarning,
                "could not check maxmemory-policy on Redis {} ({}): if it evicts keys without a "
                "TTL, fencing counters can be evicted and tokens repeat; run it with "
                "maxmemory-policy noeviction or volatile-*",
                where, text.substr(0, text.find(' ')));
    return Status::Ok();
  }
  const redisReply* r = reply->get();
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    return Status::Ok();  // a server without the setting evicts nothing
  }
  const std::string policy(r->element[1]->str, r->element[1]->len);
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

Result<ConnectionPtr> open_connection(const ConnectSpec& spec, Clock::time_point deadline,
                                      AddressesPtr addresses) {
  deadline = std::min(deadline, deadline_after(Clock::now(), spec.connect_timeout));
  if (deadline <= Clock::now()) {
    return Status(Code::kDeadlineExceeded,
                  fmt::format("{}: no time left to connect", endpoint_text(spec.endpoint)));
  }
  if (!addresses) {
    auto found = Lookup::start(spec.endpoint)->wait(deadline);
    if (!found.ok()) return found.status();
    addresses = std::move(*found);
  }
  auto started = Connection::start(std::move(addresses), endpoint_text(spec.endpoint));
  if (!started.ok()) return started.status();
  std::vector<Exchange> one;
  one.emplace_back(std::move(*started), setup_commands(spec), nullptr, nullptr);
  drive(one, [&](std::size_t) { return deadline; });
  if (!one[0].error.ok()) return one[0].error;
  return std::move(one[0].connection);
}

Result<Reply> run_command(Connection& connection, const std::vector<std::string>& args,
                          Clock::time_point deadline) {
  const std::string command = format_command(args);
  const std::vector<const std::string*> commands = {&command};
  std::vector<Reply> replies;
  std::vector<Exchange> one;
  // The exchange borrows the connection: it is handed back below whatever happened.
  one.emplace_back(ConnectionPtr(&connection), std::vector<std::string>{}, &commands, &replies);
  drive(one, [&](std::size_t) { return deadline; });
  (void)one[0].connection.release();
  if (!one[0].error.ok()) return one[0].error;
  return std::move(replies.front());
}

Status flush(Connection& connection, Clock::time_point deadline) {
  while (connection.wants_write()) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left <= milliseconds(0)) {
      return Status(
          Code::kDeadlineExceeded,
          fmt::format("Redis at {} did not take the command in time", connection.address()));
    }
    pollfd fd{connection.fd(), POLLOUT, 0};
    if (::poll(&fd, 1, static_cast<int>(left.count())) > 0) {
      if (Status st = connection.on_writable(); !st.ok()) return st;
    }
  }
  return Status::Ok();
}

Result<ConnectionPtr> Instance::checkout(Clock::time_point deadline) {
  if (auto idle = checkout_idle()) return std::move(*idle);
  if (Status refused = may_connect(); !refused.ok()) return refused;
  auto found = addresses(std::min(deadline, deadline_after(Clock::now(), spec_.connect_timeout)));
  if (!found.ok()) {
    open_failed(found.status());
    return found.status();
  }
  auto opened = open_connection(spec_, deadline, std::move(*found));
  if (opened.ok()) {
    this->opened();
  } else {
    open_failed(opened.status());
  }
  return opened;
}

std::optional<ConnectionPtr> Instance::checkout_idle() {
  MutexLock lock(mu_);
  if (idle_.empty()) return std::nullopt;
  ConnectionPtr c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

Status Instance::may_connect() {
  MutexLock lock(mu_);
  return backoff_.refusal(Clock::now());
}

void Instance::opened() {
  MutexLock lock(mu_);
  backoff_.connected();
  reconnects_.connected();
}

void Instance::open_failed(const Status& why) {
  MutexLock lock(mu_);
  answering_ = false;
  if (backoff_.failed(why, Clock::now())) reconnects_.failed();
}

void Instance::start_lookup() {
  MutexLock lock(mu_);
  const bool fresh = addresses_ && Clock::now() - addresses_at_ < kAddressesFor;
  if (!fresh && !lookup_) lookup_ = Lookup::start(spec_.endpoint);
}

Result<AddressesPtr> Instance::addresses(Clock::time_point deadline) {
  start_lookup();
  std::shared_ptr<Lookup> lookup;
  {
    MutexLock lock(mu_);
    if (!lookup_) return addresses_;  // fresh
    lookup = lookup_;
    // Stale ones serve while the lookup refreshes them: no call waits for a name server then.
    if (addresses_ && !lookup->done()) return addresses_;
  }
  auto found = lookup->wait(deadline);  // without the mutex: others may look meanwhile
  MutexLock lock(mu_);
  if (lookup_ == lookup && lookup->done()) lookup_.reset();  // its result is taken now
  if (found.ok()) {
    addresses_ = *found;
    addresses_at_ = Clock::now();
    return found;
  }
  if (addresses_) return addresses_;  // the name server failed or is late: the last ones found
  return found;
}

void Instance::connect_in_background() {
  MutexLock lock(mu_);
  if (connecting_ || !backoff_.refusal(Clock::now()).ok()) return;
  connecting_ = true;
  if (connector_.joinable()) connector_.join();  // the previous one has finished
  connector_ = std::jthread([this] {
    name_this_thread("fl-connect");
    const auto deadline = Clock::now() + spec_.connect_timeout;
    auto found = addresses(deadline);
    auto opened = found.ok() ? open_connection(spec_, deadline, std::move(*found))
                             : Result<ConnectionPtr>(found.status());
    MutexLock done(mu_);
    connecting_ = false;
    if (opened.ok()) {
      backoff_.connected();
      reconnects_.connected();
      // Not answering() yet: the setup answered, but a server slower than a round's grace also
      // does. Only a call's commands answered in time (checkin) say so.
      idle_.push_back(std::move(*opened));
      return;
    }
    answering_ = false;
    if (backoff_.failed(opened.status(), Clock::now())) reconnects_.failed();
  });
}

void Instance::checkin(ConnectionPtr connection) {
  constexpr std::size_t kMaxIdle = 32;
  MutexLock lock(mu_);
  answering_ = true;
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

void Instance::note_failure() {
  MutexLock lock(mu_);
  answering_ = false;
  idle_.clear();  // the server probably went away: drop connections that would fail the same way
  reconnects_.failed();
}

std::string Instance::address() const { return endpoint_text(spec_.endpoint); }

void Instance::drop_idle() {
  MutexLock lock(mu_);
  idle_.clear();
}

void Instance::note_unanswered() {
  MutexLock lock(mu_);
  answering_ = false;
  idle_.clear();  // a server that let one connection wait would let the others wait as long
}

bool Instance::answering() const {
  MutexLock lock(mu_);
  return answering_;
}

PolledCall::PolledCall(Instance& instance, std::vector<const std::string*> commands)
    : instance_(instance), commands_(std::move(commands)) {}

PolledCall::~PolledCall() = default;

Result<std::unique_ptr<PolledCall>> PolledCall::start(Instance& instance,
                                                      std::vector<const std::string*> commands,
                                                      ConnectionPtr& own) {
  std::unique_ptr<PolledCall> call(new PolledCall(instance, std::move(commands)));
  if (own) {
    call->exchange_ = std::make_unique<Exchange>(std::move(own), std::vector<std::string>{},
                                                 &call->commands_, &call->replies_);
    return call;
  }
  if (Status refused = instance.may_connect(); !refused.ok()) return refused;
  instance.start_lookup();
  auto addresses = instance.addresses(Clock::now());  // the cached ones, or a numeric address
  if (!addresses.ok()) return addresses.status();     // the lookup goes on for the next call
  auto connection = Connection::start(std::move(*addresses), instance.address());
  if (!connection.ok()) {
    instance.open_failed(connection.status());
    return connection.status();
  }
  call->exchange_ = std::make_unique<Exchange>(
      std::move(*connection), setup_commands(instance.spec()), &call->commands_, &call->replies_);
  return call;
}

int PolledCall::fd() const { return exchange_->connection->fd(); }

short PolledCall::poll_events() const { return exchange_->connection->poll_events(); }

bool PolledCall::active() const { return exchange_ && exchange_->active(); }

void PolledCall::on_events(short revents) { exchange_->on_events(revents); }

void PolledCall::expire() {
  if (exchange_) exchange_->expire();
}

Result<std::vector<Reply>> PolledCall::finish(ConnectionPtr& own) {
  Exchange& exchange = *exchange_;
  if (exchange.opened) instance_.opened();
  if (exchange.phase == Exchange::Phase::kDone) {
    own = std::move(exchange.connection);
    exchange_.reset();
    return std::move(replies_);
  }
  Status error = exchange.error;
  exchange.connection->abort();
  if (exchange.failed_opening) {
    instance_.open_failed(error);
  } else if (error.code() != Code::kDeadlineExceeded) {
    instance_.note_failure();  // the server probably went away
  }
  exchange_.reset();
  return error;
}

namespace {

bool is_noscript(const Reply& reply) {
  return reply && reply->type == REDIS_REPLY_ERROR && reply->str != nullptr &&
         std::string_view(reply->str, reply->len).starts_with("NOSCRIPT");
}

// One pass of fan_out (below).
void fan_out_once(std::vector<InstanceCall>& calls, Clock::time_point deadline,
                  const PipelineLimits& limits) {
  const bool stalls = limits.stall > Clock::duration::zero();
  const Clock::time_point started = Clock::now();
  // 1. Queue every command for every instance on an idle connection, or on a new one that this
  // loop opens. An instance without an idle connection that is not known to answer (reconnecting,
  // or its last connection went unanswered) is connected in the background when the others are
  // enough without it (its connect must not hold up the round). One that answers but whose
  // connections are all in use by concurrent calls is connected here: leaving it out would cost
  // a healthy instance its part of this call (a Redlock waiter its place in line there).
  std::vector<std::optional<ConnectionPtr>> idle(calls.size());
  std::vector<bool> answering(calls.size(), false);
  std::size_t have_idle = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].commands.empty()) continue;  // nothing for this instance
    idle[i] = calls[i].instance->checkout_idle();
    if (idle[i]) {
      have_idle++;
    } else {
      answering[i] = calls[i].instance->answering();
    }
  }
  const bool may_leave_out =
      limits.enough > 0 && limits.enough < calls.size() && have_idle >= limits.enough;
  auto later = [&](std::size_t i) { return may_leave_out && !answering[i]; };
  // Names of the instances to connect here are looked up at once, each on a thread of its own.
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (!calls[i].commands.empty() && !idle[i] && !later(i)) calls[i].instance->start_lookup();
  }
  std::vector<Exchange> exchanges;
  std::vector<std::size_t> call_of;  // exchange -> call
  exchanges.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    InstanceCall& call = calls[i];
    call.replies.clear();
    call.error = Status::Ok();
    call.sent = false;
    if (call.commands.empty()) continue;
    if (idle[i]) {
      exchanges.emplace_back(std::move(*idle[i]), std::vector<std::string>{}, &call.commands,
                             &call.replies);
    } else if (later(i)) {
      call.instance->connect_in_background();
      call.error = Status(Code::kUnavailable,
                          fmt::format("Redis at {}: reconnecting", call.instance->address()));
      continue;
    } else {
      if (Status refused = call.instance->may_connect(); !refused.ok()) {
        call.error = std::move(refused);
        continue;
      }
      // Every lookup was started before this loop (below): this waits for the slowest once.
      auto addresses = call.instance->addresses(
          std::min(deadline, deadline_after(started, call.instance->spec().connect_timeout)));
      if (!addresses.ok()) {
        call.instance->open_failed(addresses.status());
        call.error = addresses.status();
        continue;
      }
      auto connection = Connection::start(std::move(*addresses), call.instance->address());
      if (!connection.ok()) {
        call.instance->open_failed(connection.status());
        call.error = connection.status();
        continue;
      }
      exchanges.emplace_back(std::move(*connection), setup_commands(call.instance->spec()),
                             &call.commands, &call.replies);
    }
    call.sent = true;  // from here on, some of it may reach the server
    call_of.push_back(i);
  }
  // 2. Drive every connection until each has answered or is out of time.
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
  auto due = [&](std::size_t e) {
    if (!enough_at && enough_answered()) enough_at = Clock::now();
    const Exchange& exchange = exchanges[e];
    Clock::time_point at = stalls ? std::min(deadline, exchange.progress + limits.stall) : deadline;
    if (exchange.phase == Exchange::Phase::kOpening) {
      at =
          std::min(at, deadline_after(started, calls[call_of[e]].instance->spec().connect_timeout));
    }
    if (!enough_at) return at;
    at = std::min(at, limits.enough_by);
    if (limits.grace != Clock::duration::max()) {
      at = std::min(at, *enough_at + std::max(limits.grace, *enough_at - started));
    }
    return at;
  };
  drive(exchanges, due);
  // 3. Outcomes: a connection that answered everything goes back to the pool; any other is
  // closed with a reset (a half-read connection can never be reused).
  for (std::size_t e = 0; e < exchanges.size(); ++e) {
    Exchange& exchange = exchanges[e];
    InstanceCall& call = calls[call_of[e]];
    if (exchange.opened) call.instance->opened();
    if (exchange.phase == Exchange::Phase::kDone) {
      call.instance->checkin(std::move(exchange.connection));
      continue;
    }
    call.error = exchange.error;
    exchange.connection->abort();
    if (exchange.failed_opening) {
      call.instance->open_failed(exchange.error);
    } else if (exchange.error.code() != Code::kDeadlineExceeded) {
      call.instance->note_failure();  // the server probably went away
    } else {
      call.instance->note_unanswered();
    }
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
