#include "core/try_batcher.h"

#include <utility>
#include <vector>

namespace fencelock::detail {

void TryBatcher::submit(Request request, Done done) {
  {
    MutexLock lock(mu_);
    queue_.push_back(Pending{std::move(request), std::move(done)});
    if (running_) return;  // the running batch posts the next one when it ends
    running_ = true;
  }
  engine_().post([this] { run_one_batch(); });
}

void TryBatcher::run_one_batch() {
  std::vector<Pending> batch;
  {
    MutexLock lock(mu_);
    while (!queue_.empty() && batch.size() < kMaxBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  std::vector<GrantRequest> requests;
  requests.reserve(batch.size());
  for (const Pending& p : batch) {
    requests.push_back(GrantRequest{p.request.key, p.request.owner, p.request.ttl,
                                    p.request.metadata, p.request.queue_for, p.request.ticket});
  }
  std::vector<TryResult> results =
      requests.empty() ? std::vector<TryResult>() : backend_.try_acquire_many(requests);
  {
    // The next batch goes first: a try that comes due in a callback below joins it.
    MutexLock lock(mu_);
    running_ = !queue_.empty();
    if (running_) engine_().post([this] { run_one_batch(); });
  }
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].done(std::move(results[i]));
}

}  // namespace fencelock::detail
