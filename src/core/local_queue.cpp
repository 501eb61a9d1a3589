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
  auto place = line.order.insert(line.order.end(), Place{});
  const bool waited = line.order.begin() != place;
  bool at_head =
      line.changed.wait_until(lock, stop, deadline, [&] { return line.order.begin() == place; });
  if (at_head) return Ticket(this, key, place, waited);
  line.order.erase(place);  // not the head (the wait's predicate said so): the head is unchanged
  line.changed.notify_all();
  if (line.order.empty()) lines_.erase(key);
  if (stop.stop_requested()) return Status(Code::kCancelled, "acquisition cancelled");
  return Status(Code::kLocked, "held by another thread of this process for the whole wait");
}

LocalQueue::Ticket LocalQueue::enter_async(const std::string& key, std::function<void()> on_head,
                                           bool& at_head) {
  MutexLock lock(mu_);
  Line& line = lines_[key];
  auto place = line.order.insert(line.order.end(), Place{});
  at_head = line.order.begin() == place;
  if (!at_head) place->on_head = std::move(on_head);
  return Ticket(this, key, place, !at_head);
}

void LocalQueue::leave(const std::string& key, std::list<Place>::iterator place) {
  std::function<void()> next_head;
  {
    MutexLock lock(mu_);
    auto it = lines_.find(key);
    const bool was_head = it->second.order.begin() == place;
    it->second.order.erase(place);
    if (it->second.order.empty()) {
      lines_.erase(it);
    } else {
      it->second.changed.notify_all();
      if (was_head) next_head = std::move(it->second.order.front().on_head);
    }
  }
  if (next_head) next_head();
}

std::size_t LocalQueue::waiting(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = lines_.find(key);
  return it == lines_.end() ? 0 : it->second.order.size();
}

}  // namespace fencelock::detail
