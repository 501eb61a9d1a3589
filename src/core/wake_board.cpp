#include "core/wake_board.h"

#include <vector>

#include "core/mutex.h"

namespace fencelock::detail {

class BoardWatch final : public ReleaseWatch {
 public:
  BoardWatch(WakeBoard& board, std::string id, std::uint64_t seen)
      : board_(board), id_(std::move(id)), seen_(seen) {}
  ~BoardWatch() override { board_.forget(id_, waker_); }
  bool wait_until(Clock::time_point until, std::stop_token stop) override {
    return board_.wait(id_, seen_, until, std::move(stop));
  }
  bool set_waker(std::function<void()> wake) override {
    waker_ = board_.add_waker(id_, std::move(wake));
    return true;
  }

 private:
  WakeBoard& board_;
  std::string id_;
  std::uint64_t seen_;
  std::uint64_t waker_ = 0;
};

std::unique_ptr<ReleaseWatch> WakeBoard::watch(const std::string& id) {
  MutexLock lock(mu_);
  slots_[id].watchers++;
  return std::make_unique<BoardWatch>(*this, id, events_for(id));
}

bool WakeBoard::watching() const {
  MutexLock lock(mu_);
  return !slots_.empty();
}

bool WakeBoard::notify(const std::string& id) {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(mu_);
    auto it = slots_.find(id);
    if (it == slots_.end()) return false;
    it->second.events++;
    changed_.notify_all();
    for (const auto& [waker_id, waker] : it->second.wakers) wake.push_back(waker);
  }
  for (const auto& waker : wake) waker();
  return true;
}

void WakeBoard::notify_all() {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(mu_);
    broadcasts_++;
    changed_.notify_all();
    for (const auto& [id, slot] : slots_) {
      for (const auto& [waker_id, waker] : slot.wakers) wake.push_back(waker);
    }
  }
  for (const auto& waker : wake) waker();
}

std::uint64_t WakeBoard::add_waker(const std::string& id, std::function<void()> wake) {
  MutexLock lock(mu_);
  const std::uint64_t waker_id = next_waker_++;
  slots_[id].wakers.emplace(waker_id, std::move(wake));
  return waker_id;
}

std::uint64_t WakeBoard::events_for(const std::string& id) const {
  auto it = slots_.find(id);
  return broadcasts_ + (it == slots_.end() ? 0 : it->second.events);
}

void WakeBoard::forget(const std::string& id, std::uint64_t waker) {
  MutexLock lock(mu_);
  auto it = slots_.find(id);
  if (waker != 0) it->second.wakers.erase(waker);
  if (--it->second.watchers == 0) slots_.erase(it);
}

bool WakeBoard::wait(const std::string& id, std::uint64_t& seen, Clock::time_point until,
                     std::stop_token stop) {
  MutexLock lock(mu_);
  bool woke = changed_.wait_until(lock, stop, until,
                                  [&]() FENCELOCK_REQUIRES(mu_) { return events_for(id) != seen; });
  seen = events_for(id);
  return woke;
}

}  // namespace fencelock::detail
