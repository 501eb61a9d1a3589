// Batcher: calls of a Client's asynchronous operations that come due together go to the backend
// as one call. At most one batch runs at a time, on the engine; calls submitted meanwhile wait for
// the next one, which takes up to kMaxBatch of them. So a lone call goes out at once, and under
// load the batches grow with the load. TryBatcher (tries) and ReleaseBatcher (releases) are the
// two kinds.
//
// Thread-safety: submit() may be called from any thread; batches run on the engine.
#pragma once

#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/engine.h"
#include "core/mutex.h"

namespace fencelock::detail {

template <class Item, class Outcome>
class Batcher {
 public:
  // Called on an engine thread with the call's outcome.
  using Done = std::function<void(Outcome)>;
  static constexpr std::size_t kMaxBatch = 512;

  // `engine` is asked for the engine on the first submit. REQUIRES: the engine outlives every
  // batch (the pending calls' callbacks keep their Client alive).
  explicit Batcher(std::function<Engine&()> engine) : engine_(std::move(engine)) {}
  virtual ~Batcher() = default;
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  void submit(Item item, Done done) {
    {
      MutexLock lock(mu_);
      queue_.push_back(Pending{std::move(item), std::move(done)});
      if (running_) return;  // the running batch posts the next one when it ends
      running_ = true;
    }
    engine_().post([this] { run_one_batch(); });
  }

 protected:
  // The outcomes of `items`, one each in order (fewer: the rest get failed()). May throw.
  virtual std::vector<Outcome> run(const std::vector<Item>& items) = 0;
  // The outcome of a call the batch gave none: `why` says what went wrong.
  virtual Outcome failed(const std::string& why) const = 0;

 private:
  struct Pending {
    Item item;
    Done done;
  };

  void run_one_batch() {
    std::vector<Item> items;
    std::vector<Done> dones;
    {
      MutexLock lock(mu_);
      while (!queue_.empty() && items.size() < kMaxBatch) {
        items.push_back(std::move(queue_.front().item));
        dones.push_back(std::move(queue_.front().done));
        queue_.pop_front();
      }
    }
    std::string why = "the backend answered fewer calls than it was sent";
    std::vector<Outcome> outcomes;
    try {
      if (!items.empty()) outcomes = run(items);
    } catch (const std::exception& e) {
      // Every caller still hears once, and the batcher goes on: a throw must not leave running_
      // set, or every later call of the Client would wait for a batch that never ends.
      outcomes.clear();
      why = fmt::format("a batch failed: {}", e.what());
    }
    outcomes.reserve(items.size());
    while (outcomes.size() < items.size()) outcomes.push_back(failed(why));
    {
      // The next batch goes first: a call that comes due in a callback below joins it.
      MutexLock lock(mu_);
      running_ = !queue_.empty();
      if (running_) engine_().post([this] { run_one_batch(); });
    }
    for (std::size_t i = 0; i < items.size(); ++i) dones[i](std::move(outcomes[i]));
  }

  const std::function<Engine&()> engine_;
  Mutex mu_;
  std::deque<Pending> queue_ FENCELOCK_GUARDED_BY(mu_);
  bool running_ FENCELOCK_GUARDED_BY(mu_) = false;  // a batch is posted or running
};

}  // namespace fencelock::detail
