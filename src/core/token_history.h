// TokenHistory: the largest fencing token this Client was granted per key, so that a grant whose
// token is not above one this Client saw granted before can be refused (docs/PROTOCOLS.md,
// "Tokens after data loss": the backstop where a backend's assumption failed, e.g. a Redis
// instance that lost its data while its clock stepped back, or a PostgreSQL failover to a
// standby that missed the newest tokens).
//
// It sees only this Client's own grants: a violation between two processes goes unnoticed here
// (the fence at the resource still refuses the older token's writes). Bounded: the `capacity`
// keys granted most recently are remembered, the others forgotten.
//
// Thread-safety: safe to call from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>

#include "core/mutex.h"

namespace fencelock::detail {

class TokenHistory {
 public:
  explicit TokenHistory(std::size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  static constexpr std::size_t kDefaultCapacity = 4096;

  // The largest token recorded for `key`, 0 when none is remembered. An acquisition reads it
  // before it starts: a grant must exceed every grant completed before it began (a grant that
  // completes meanwhile, a shared lock's, may have any order against it).
  std::uint64_t largest(const std::string& key) const;
  // Records a grant of `key` with `token` (keeps the larger of it and the recorded one).
  void record(const std::string& key, std::uint64_t token);

 private:
  struct Entry {
    std::uint64_t token;
    std::list<std::string>::iterator age;  // its place in by_age_
  };
  const std::size_t capacity_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ FENCELOCK_GUARDED_BY(mu_);
  std::list<std::string> by_age_ FENCELOCK_GUARDED_BY(mu_);  // most recently granted first
};

}  // namespace fencelock::detail
