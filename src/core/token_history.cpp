#include "core/token_history.h"

#include <algorithm>

namespace fencelock::detail {

std::uint64_t TokenHistory::largest(const std::string& key) const {
  MutexLock lock(mu_);
  auto found = entries_.find(key);
  return found == entries_.end() ? 0 : found->second.token;
}

void TokenHistory::record(const std::string& key, std::uint64_t token) {
  if (capacity_ == 0) return;
  MutexLock lock(mu_);
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    found->second.token = std::max(found->second.token, token);
    by_age_.splice(by_age_.begin(), by_age_, found->second.age);
    return;
  }
  if (entries_.size() >= capacity_) {
    entries_.erase(by_age_.back());
    by_age_.pop_back();
  }
  by_age_.push_front(key);
  entries_.emplace(key, Entry{token, by_age_.begin()});
}

}  // namespace fencelock::detail
