// The bare-hiredis baseline: the same round trips as fencelock's Redis backends, with the same
// scripts and nothing else (no pool, no queue, no renewer). For N instances every command is
// written to all of them before any reply is read, exactly as the library's fan-out does.
#pragma once

#include <hiredis/hiredis.h>

#include "redis/connection.h"

#include <string>
#include <string_view>
#include <vector>

namespace fencelock::bench {

class RedisBaseline {
 public:
  // Every instance of the redis:// or redlock:// `uri`, logged in as the library would (the
  // URI's credentials, else FENCELOCK_REDIS_PASSWORD / FENCELOCK_REDIS_USER). Throws
  // std::runtime_error when one cannot be reached or refuses the credentials.
  explicit RedisBaseline(const std::string& uri);
  ~RedisBaseline();
  RedisBaseline(const RedisBaseline&) = delete;
  RedisBaseline& operator=(const RedisBaseline&) = delete;

  // One acquire + release cycle of `key`: round 1 everywhere, round 2 where granted (N > 1),
  // release everywhere. Returns false when the lock was not granted by a majority.
  bool cycle(const std::string& key);

 private:
  std::vector<redisReply*> everywhere(const std::vector<redisContext*>& targets,
                                      const std::string& command);

  std::vector<redisContext*> contexts_;
  std::uint64_t counter_ = 0;
};

// The "host:port" of every server in a backend URI (core/uri.h parses it; credentials and
// options are dropped).
std::vector<std::string> endpoints_of(const std::string& uri);

// A blocking hiredis context (the baseline is a bare hiredis loop, not fencelock's I/O).
struct HiredisContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using HiredisContext = std::unique_ptr<redisContext, HiredisContextDeleter>;

// A blocking hiredis connection to every instance of a redis:// or redlock:// URI with its
// credentials and database, `scripts` loaded. Throws std::runtime_error as RedisBaseline does.
std::vector<HiredisContext> redis_connections(const std::string& uri,
                                              const std::vector<std::string_view>& scripts);

}  // namespace fencelock::bench
