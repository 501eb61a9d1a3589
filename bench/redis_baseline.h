// The bare-hiredis baseline: the same round trips as fencelock's Redis backends, with the same
// scripts and nothing else (no pool, no queue, no renewer). For N instances every command is
// written to all of them before any reply is read, exactly as the library's fan-out does.
#pragma once

#include <hiredis/hiredis.h>

#include <string>
#include <vector>

namespace fencelock::bench {

class RedisBaseline {
 public:
  // `endpoints`: "host:port" of each instance. Throws std::runtime_error when one cannot be
  // reached.
  explicit RedisBaseline(const std::vector<std::string>& endpoints);
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
// options are dropped: the baselines do not log in).
std::vector<std::string> endpoints_of(const std::string& uri);

}  // namespace fencelock::bench
