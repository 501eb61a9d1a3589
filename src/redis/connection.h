// Redis connections for the Redis and Redlock backends (hiredis 0.14, synchronous contexts).
//
// Concurrency mechanism (one for the driver, chosen by measurement: see docs/BENCHMARKS.md):
// blocking hiredis contexts, pooled per instance, and a fan-out that writes a call's commands to
// every instance before reading any reply, then collects replies with poll() under one deadline.
// Latency is the slowest instance's reply, never the sum. The pub/sub side (subscriber.h) is one
// thread per instance.
//
// Thread-safety: Instance and fan_out are safe to use from many threads; a RedisConnection is
// used by one thread at a time (checked out of its Instance's pool).
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/reconnects.h"
#include "core/uri.h"
#include "fencelock/options.h"

namespace fencelock::detail::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

// A RESP-encoded command, formatted once and sent to any number of instances.
std::string format_command(const std::vector<std::string>& args);

// How to reach and log in to one instance.
struct ConnectSpec {
  Endpoint endpoint;
  std::string user;
  std::string password;
  bool has_password = false;
  int db = 0;
  milliseconds connect_timeout{1000};
  std::vector<std::string_view> scripts;  // SCRIPT LOADed on every new connection
};

// The one reading of a redis:// or redlock:// URI's connection parts, for the backends, the fence
// and the benchmarks' baselines: one spec per endpoint with the URI's credentials (else
// FENCELOCK_REDIS_PASSWORD and FENCELOCK_REDIS_USER from the environment) and its database number
// (the path: a whole number >= 0, else kInvalidArgument). Options (the query) are the caller's.
Result<std::vector<ConnectSpec>> connect_specs(const ParsedUri& uri, milliseconds connect_timeout);

// Opens a blocking context, then AUTH (when a password is set), SELECT (db != 0), a PING and
// SCRIPT LOAD of spec.scripts (so EVALSHA works after a server restart).
// kUnavailable when the server cannot be reached, kUnauthenticated / kPermissionDenied when it
// refuses the credentials.
Result<ContextPtr> open_context(const ConnectSpec& spec, Clock::time_point deadline);

// Fencing counters and fence records carry no TTL and must never be evicted: kInvalidArgument,
// naming the policy, when the server's maxmemory-policy evicts keys without a TTL (allkeys-*),
// unless `allow_eviction` (the URI option allow_eviction=true accepts the risk). When CONFIG GET
// is refused (ACL, renamed command) the policy cannot be checked: a warning goes to the log sink
// and the connection is accepted. kUnavailable when the server does not answer.
Status check_eviction_policy(redisContext* context, std::string_view where, bool allow_eviction);

// Maps a server error reply ("WRONGPASS ...", "NOPERM ...") to a Status.
Status status_from_error_reply(std::string_view text, std::string_view where);

// One Redis instance: a pool of idle connections and a reconnect backoff.
class Instance {
 public:
  explicit Instance(ConnectSpec spec) : spec_(std::move(spec)) {}

  // An idle connection, or a new one. While the instance is in reconnect backoff this fails at
  // once with the last error instead of trying again.
  Result<ContextPtr> checkout(Clock::time_point deadline);
  // An idle connection, if there is one (never connects).
  std::optional<ContextPtr> checkout_idle();
  // Opens a connection on a thread of its own (within connect_timeout) and puts it in the pool,
  // unless one is being opened already or the instance is in reconnect backoff: a fan-out that
  // has a majority without this instance does not wait for its connect.
  void connect_in_background();
  // Returns a healthy connection to the pool.
  void checkin(ContextPtr context);
  // Records that a connection broke: the next checkout reconnects, with backoff if it fails.
  void note_failure();
  // Drops the idle connections (without counting a failure): the next checkout opens a new one.
  void drop_idle();

  const ConnectSpec& spec() const { return spec_; }
  // "127.0.0.1:7001" (or "[::1]:7001").
  std::string address() const;
  // Connections opened again after a failure (ReconnectCounter).
  std::uint64_t reconnects() const { return reconnects_.count(); }

 private:
  ConnectSpec spec_;
  ReconnectCounter reconnects_;
  Mutex mu_;
  std::vector<ContextPtr> idle_ FENCELOCK_GUARDED_BY(mu_);
  ReconnectBackoff backoff_ FENCELOCK_GUARDED_BY(mu_);
  bool connecting_ FENCELOCK_GUARDED_BY(mu_) = false;  // a background connect is running
  // Last member: destroyed (joined) first, while everything it uses still exists.
  std::jthread connector_ FENCELOCK_GUARDED_BY(mu_);
};

// One instance's part of a fan-out: commands to send (pipelined) and, after fan_out(), either
// one reply per command or an error.
struct InstanceCall {
  Instance* instance = nullptr;
  std::vector<const std::string*> commands;  // formatted with format_command
  // The replies received, in command order; on an error, those that came before it.
  std::vector<Reply> replies;
  Status error;  // not OK when the instance could not answer every command in time
  // Whether the commands were written to a connection at all (false: no connection, or one was
  // being made in the background): a command never sent cannot run late.
  bool sent = false;
};

// Bounds for a fan-out, besides its deadline.
struct PipelineLimits {
  // An instance that sends no reply for this long fails, as does a connect that takes longer
  // (zero: only the deadline). A busy server that keeps answering runs on until the deadline.
  Clock::duration stall = Clock::duration::zero();
  // Once `enough` instances (a majority) have answered every command, the others fail at
  // `enough_by` (or at once if it has passed), and at most `grace` after that moment, or as long
  // again as the majority took if that is longer (a slow network slows everyone alike): one
  // slow instance cannot hold the round open. With enough < the number of calls, an instance
  // without an idle connection is connected in the background (and fails this call) when the
  // others are enough without it.
  std::size_t enough = 0;
  Clock::time_point enough_by = Clock::time_point::max();
  Clock::duration grace = Clock::duration::max();
};

// Sends every call's commands to its instance, then waits for all replies until `deadline`
// (and the limits). Replies that arrived before an instance failed stay in its `replies`. A
// command answered NOSCRIPT (a flushed script cache: it did not run) is sent once more on a new
// connection, which loads the scripts, within the same deadline; its new reply takes the
// NOSCRIPT's place.
void fan_out(std::vector<InstanceCall>& calls, Clock::time_point deadline,
             const PipelineLimits& limits = {});

}  // namespace fencelock::detail::redis
