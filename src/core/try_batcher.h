// TryBatcher: the tries of a Client's asynchronous acquisitions that come due together go to the
// backend as one call (BatchedTries::try_acquire_many; one by one for a backend without it): on
// Redis, one write per instance for all of them instead of one round trip each, one after another,
// on an engine thread.
//
// At most one batch runs at a time; tries submitted meanwhile wait for the next one, which takes
// up to kMaxBatch of them. So a lone try goes out at once, and under load the batches grow with
// the load (after 10,000 releases at once, the 10,000 tries that follow go out in about twenty
// writes per instance).
//
// Thread-safety: submit() may be called from any thread; batches run on the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "core/backend.h"
#include "core/engine.h"
#include "core/mutex.h"

namespace fencelock::detail {

class TryBatcher {
 public:
  // A GrantRequest whose parts it owns.
  struct Request {
    LockKey key;
    OwnerId owner;
    milliseconds ttl;
    std::string metadata;
    milliseconds queue_for;
    std::uint64_t ticket;
    milliseconds budget;  // the try's, from when it is sent (a batch takes the least of its tries')
  };
  // Called on an engine thread with the try's outcome.
  using Done = std::function<void(TryResult)>;
  static constexpr std::size_t kMaxBatch = 512;

  // `engine` is asked for the engine on the first submit. REQUIRES: `backend` and the engine
  // outlive every batch (the pending tries' callbacks keep their Client alive).
  TryBatcher(Backend& backend, std::function<Engine&()> engine)
      : backend_(backend), engine_(std::move(engine)) {}

  void submit(Request request, Done done);

 private:
  struct Pending {
    Request request;
    Done done;
  };
  void run_one_batch();

  Backend& backend_;
  const std::function<Engine&()> engine_;
  Mutex mu_;
  std::deque<Pending> queue_ FENCELOCK_GUARDED_BY(mu_);
  bool running_ FENCELOCK_GUARDED_BY(mu_) = false;  // a batch is posted or running
};

}  // namespace fencelock::detail
