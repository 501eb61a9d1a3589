#include "core/try_batcher.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/wait_loop.h"

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
  Status failed(Code::kInternal, "the backend answered fewer tries than it was sent");
  std::vector<GrantRequest> requests;
  requests.reserve(batch.size());
  milliseconds budget = milliseconds::max();
  for (const Pending& p : batch) budget = std::min(budget, p.request.budget);
  for (const Pending& p : batch) {
    requests.push_back(GrantRequest{p.request.key, p.request.owner, p.request.ttl,
                                    p.request.metadata, p.request.queue_for, p.request.ticket});
  }
  std::vector<TryResult> results;
  try {
    if (!requests.empty()) {
      BatchedTries* batched = backend_.batched_tries();
      results = batched != nullptr ? batched->try_acquire_many(requests, budget)
                                   : try_one_by_one(backend_, requests, budget);
    }
  } catch (const std::exception& e) {
    // Every caller still hears once, and the batcher goes on: a throw here used to leave
    // running_ set, and every later try of the Client waited for a batch that never ended.
    results.clear();
    failed = Status(Code::kInternal, fmt::format("a batch of tries failed: {}", e.what()));
  }
  // One outcome per try, whatever the backend returned.
  results.resize(batch.size(), TryResult{failed, std::nullopt, milliseconds(0)});
  {
    // The next batch goes first: a try that comes due in a callback below joins it.
    MutexLock lock(mu_);
    running_ = !queue_.empty();
    if (running_) engine_().post([this] { run_one_batch(); });
  }
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i].done(std::move(results[i]));
}

}  // namespace fencelock::detail
