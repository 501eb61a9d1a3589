#include "core/local_queue.h"

#include <fmt/format.h>
#include "core/mutex.h"

namespace fencelock::detail {

LocalQueue::Ticket::Ticket(Ticket&& other) noexcept
    : queue_(other.queue_),
      key_(std::move(other.key_)),
      place_(other.place_),
      waited_(other.waited_) {
  other.queue_ = nullptr;
}

LocalQueue::Ticket::~Ticket() {
  if (queue_ != nullptr) queue_->leave(key_, place_);
}

Result<LocalQueue::Ticket> LocalQueue::enter(const std::string& key,
                                             std::chrono::steady_clock::time_point deadline,
                                             std::stop_token stop) {
  MutexLock lock(mu_);
  Line& line = lines_[key];
  auto place = line.order.insert(line.order.end(), 0);
  const bool waited = line.order.begin() != place;
  bool at_head =
      line.changed.wait_until(lock, stop, deadline, [&] { return line.order.begin() == place; });
  if (at_head) return Ticket(this, key, place, waited);
  line.order.erase(place);
  line.changed.notify_all();
  if (line.order.empty()) lines_.erase(key);
  if (stop.stop_requested()) return Status(Code::kCancelled, "acquisition cancelled");
  return Status(Code::kLocked, "held by another thread of this process for the whole wait");
}

void LocalQueue::leave(const std::string& key, std::list<int>::iterator place) {
  MutexLock lock(mu_);
  auto it = lines_.find(key);
  it->second.order.erase(place);
  if (it->second.order.empty()) {
    lines_.erase(it);
  } else {
    it->second.changed.notify_all();
  }
}

std::size_t LocalQueue::waiting(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = lines_.find(key);
  return it == lines_.end() ? 0 : it->second.order.size();
}

}  // namespace fencelock::detail
