#include "redis_baseline.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/uri.h"
#include "redis/connection.h"
#include "redis/redis_keys.h"
#include "redis_scripts.h"

namespace fencelock::bench {

using detail::redis::format_command;
namespace keys = detail::redis;
namespace lua = detail::lua;

std::vector<std::string> endpoints_of(const std::string& uri) {
  auto parsed = detail::parse_uri(uri, uri.starts_with("etcd") ? 2379 : 6379);
  if (!parsed.ok()) throw std::runtime_error(parsed.status().to_string());
  std::vector<std::string> out;
  for (const auto& ep : parsed->endpoints) out.push_back(detail::endpoint_text(ep));
  return out;
}

namespace {

// One setup command on a blocking hiredis context; throws with `what` on failure.
void setup(redisContext* c, const std::vector<std::string>& args, const std::string& what) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  const bool ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
  std::string why = reply == nullptr ? std::string(c->errstr)
                    : ok             ? std::string()
                                     : std::string(reply->str, reply->len);
  if (reply != nullptr) freeReplyObject(reply);
  if (!ok) throw std::runtime_error(fmt::format("baseline cannot {}: {}", what, why));
}

}  // namespace

std::vector<HiredisContext> redis_connections(const std::string& uri,
                                              const std::vector<std::string_view>& scripts) {
  auto parsed = detail::parse_uri(uri, 6379);
  if (!parsed.ok()) throw std::runtime_error(parsed.status().to_string());
  // The credentials and database the library would use (the one reading of the URI).
  auto specs = detail::redis::connect_specs(*parsed, std::chrono::seconds(2));
  if (!specs.ok()) throw std::runtime_error(specs.status().to_string());
  std::vector<HiredisContext> out;
  for (const auto& spec : *specs) {
    const std::string where = detail::endpoint_text(spec.endpoint);
    HiredisContext c(
        redisConnectWithTimeout(spec.endpoint.host.c_str(), spec.endpoint.port, timeval{2, 0}));
    if (!c || c->err != 0) {
      throw std::runtime_error(
          fmt::format("baseline cannot connect to {}: {}", where, c ? c->errstr : "out of memory"));
    }
    if (spec.has_password) {
      std::vector<std::string> auth = {"AUTH"};
      if (!spec.user.empty()) auth.push_back(spec.user);
      auth.push_back(spec.password);
      setup(c.get(), auth, "log in to " + where);
    }
    if (spec.db != 0) setup(c.get(), {"SELECT", std::to_string(spec.db)}, "select on " + where);
    for (std::string_view script : scripts) {
      setup(c.get(), {"SCRIPT", "LOAD", std::string(script)}, "load a script on " + where);
    }
    out.push_back(std::move(c));
  }
  return out;
}

RedisBaseline::RedisBaseline(const std::string& uri) {
  for (auto& c : redis_connections(uri, {lua::acquire, lua::raise_fence, lua::release})) {
    contexts_.push_back(c.release());
  }
}

RedisBaseline::~RedisBaseline() {
  for (auto* c : contexts_) redisFree(c);
}

std::vector<redisReply*> RedisBaseline::everywhere(const std::vector<redisContext*>& targets,
                                                   const std::string& command) {
  for (auto* c : targets) {
    redisAppendFormattedCommand(c, command.data(), command.size());
    int done = 0;  // write now: redisGetReply would only flush a context when reading from it
    while (!done) {
      if (redisBufferWrite(c, &done) == REDIS_ERR)
        throw std::runtime_error("baseline lost a connection");
    }
  }
  std::vector<redisReply*> replies;
  for (auto* c : targets) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK)
      throw std::runtime_error("baseline lost a connection");
    replies.push_back(static_cast<redisReply*>(reply));
  }
  return replies;
}

bool RedisBaseline::cycle(const std::string& key) {
  // The same script calls as the library (redis_backend.cpp): a fresh lock value per attempt
  // (the owner id, then 16 hex digits), the attempt's tombstone key, no releases owed, and a
  // minute's tombstone life (the lock's TTL, at least a minute).
  std::string owner = fmt::format("{:032x}", ++counter_);
  std::string value = owner + fmt::format("{:016x}", counter_);
  std::string acquire = format_command(
      {"EVALSHA", std::string(lua::acquire_sha1), "7", keys::lock_key(key), keys::fence_key(key),
       keys::holder_key(key), keys::queue_key(key), keys::queue_expiry_key(key),
       keys::queue_wake_key(key), keys::tombstone_key(key, value), owner, "10000", "{}", "0", "0",
       "", value, "0", "60000"});
  std::vector<redisContext*> granted;
  std::vector<long long> counters;
  long long token = 0;
  auto replies = everywhere(contexts_, acquire);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    redisReply* r = replies[i];
    if (r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1) {
      granted.push_back(contexts_[i]);
      counters.push_back(r->element[1]->integer);
      token = std::max(token, r->element[1]->integer);
    }
    freeReplyObject(r);
  }
  bool ok = granted.size() * 2 > contexts_.size();
  // Round 2 only on instances behind the chosen token, as the protocol does.
  std::vector<redisContext*> behind;
  for (std::size_t i = 0; i < granted.size(); ++i) {
    if (counters[i] < token) behind.push_back(granted[i]);
  }
  granted = behind;
  if (ok && !granted.empty()) {
    std::string raise =
        format_command({"EVALSHA", std::string(lua::raise_fence_sha1), "3", keys::lock_key(key),
                        keys::fence_key(key), keys::holder_key(key), value, std::to_string(token)});
    for (auto* r : everywhere(granted, raise)) freeReplyObject(r);
  }
  std::string release = format_command(
      {"EVALSHA", std::string(lua::release_sha1), "6", keys::lock_key(key), keys::holder_key(key),
       keys::queue_key(key), keys::queue_expiry_key(key), keys::queue_wake_key(key),
       keys::tombstone_key(key, value), owner, "1", value, "60000"});
  for (auto* r : everywhere(contexts_, release)) freeReplyObject(r);
  return ok;
}

}  // namespace fencelock::bench
