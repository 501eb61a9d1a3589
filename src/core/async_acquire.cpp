// ClientCore::acquire_async: an acquisition as state on the engine, not as a thread.
//
// The same steps as the blocking path (client_core.cpp, wait_loop.cpp), driven by events: a
// place in the local queue (its head is told, not polled), tries on an engine thread, and
// between tries a timer (the holder's remaining TTL) and the
// backend's release events (ReleaseWatch::set_waker) race to start the next try. A stop (the
// caller's, or the last Client handle going) gives up the same way a blocking call does: the
// place in the backend's queue is left and nothing stays held.
//
// A backend that waits in a queue on its server (ServerQueue: PostgreSQL advisory locks, etcd)
// has no try to repeat: its acquire_queued() runs on a thread of its own while it waits (a
// try-only call runs on the engine), until the engine speaks those protocols without blocking.
// A backend without release events (ReleaseEvents) wakes its waiters on the timers alone.
#include <algorithm>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "core/client_core.h"
#include "core/duration.h"
#include "core/saturate.h"
#include "core/thread_name.h"
#include "core/wait_loop.h"

namespace fencelock::detail {
namespace {

class AsyncAcquire : public std::enable_shared_from_this<AsyncAcquire> {
 public:
  AsyncAcquire(std::shared_ptr<ClientCore> core, const LockKey& key, const AcquireOptions& options,
               bool campaign, ClientCore::AcquireDone done)
      : core_(std::move(core)),
        key_(key),
        options_(options),
        campaign_(campaign),
        done_(std::move(done)),
        start_(Clock::now()),
        deadline_(deadline_after(start_, options.wait)),
        waits_(options.wait > milliseconds(0)),
        hold_(std::clamp(options.ttl, milliseconds(1000), kQueueHold)) {}

  void start() {
    keep_alive_ = shared_from_this();  // until finish(): timers and wakers hold it weakly
    {
      MutexLock lock(waker_cell_->mu);
      waker_cell_->op = this;
    }
    if (Status st = core_->check_acquire(key_, options_, campaign_); !st.ok()) {
      return finish_later(st);
    }
    if (options_.stop.stop_requested() || core_->closing().stop_requested()) {
      return finish_later(Status(Code::kCancelled, "acquisition cancelled"));
    }
    std::weak_ptr<AsyncAcquire> weak = weak_from_this();
    const auto cancel = [weak] {
      if (auto self = weak.lock()) self->cancel();
    };
    // Registered before the lock is taken: a stop that came meanwhile runs cancel() right here.
    on_stop_.emplace(options_.stop, cancel);
    on_closing_.emplace(core_->closing(), cancel);
    MutexLock lock(mu_);
    if (phase_ != Phase::kQueued) return;  // cancelled already: never enter the line
    bool at_head = false;
    ticket_.emplace(core_->queue().enter_async(
        key_.str(),
        [weak, engine = &core_->engine()] {
          engine->post([weak] {
            if (auto self = weak.lock()) self->at_head();
          });
        },
        at_head));
    if (at_head) {
      core_->engine().post([self = shared_from_this()] { self->at_head(); });
    } else if (deadline_ != Clock::time_point::max()) {
      timer_ = core_->engine().post_at(deadline_, [weak] {
        if (auto self = weak.lock()) self->queue_deadline();
      });
    }
  }

 private:
  enum class Phase { kQueued, kTrying, kWaiting, kDone };
  using Outcome = Result<std::shared_ptr<LeaseState>>;

  // The caller's stop or the Client's closing: whatever waits gives up.
  void cancel() {
    MutexLock lock(mu_);
    if (phase_ == Phase::kQueued) {
      phase_ = Phase::kDone;
      lock.unlock();
      return finish_later(Status(Code::kCancelled, "acquisition cancelled"));
    }
    if (phase_ == Phase::kTrying) event_seen_ = true;  // the try must not arm its timer
    if (phase_ == Phase::kWaiting) wake_locked();      // the try sees the stop and gives up
  }

  bool cancelled() const {
    return options_.stop.stop_requested() || core_->closing().stop_requested();
  }

  // The deadline passed while another acquisition of this process held the key's line.
  void queue_deadline() {
    MutexLock lock(mu_);
    if (phase_ != Phase::kQueued) return;
    phase_ = Phase::kDone;
    lock.unlock();
    finish(Status(Code::kLocked, "held by another thread of this process for the whole wait"));
  }

  // On an engine thread: this acquisition heads the key's local line.
  void at_head() {
    {
      MutexLock lock(mu_);
      if (phase_ != Phase::kQueued) return;
      phase_ = Phase::kTrying;
      if (timer_ != 0) core_->engine().cancel(timer_);
      timer_ = 0;
      contended_ = ticket_->waited();
    }
    if (cancelled()) return finish(Status(Code::kCancelled, "acquisition cancelled"));
    granted_before_ = core_->granted_before(key_);
    Backend& backend = core_->backend();
    if (backend.server_queue() != nullptr) return acquire_on_server();
    if (ReleaseEvents* events = backend.release_events(); waits_ && events != nullptr) {
      watch_ = events->watch(key_, owner_, request_deadline(core_->options().io_timeout));
      // Through the cell, never owning this: the thread that hears releases (a backend's
      // subscriber) must never drop the last reference to the Client, whose backend joins it.
      (void)watch_->set_waker([cell = waker_cell_] {
        MutexLock lock(cell->mu);
        if (cell->op != nullptr) cell->op->on_release_event();
      });
    }
    try_once();
  }

  AcquireCall call() const {
    return AcquireCall{key_,
                       owner_,
                       options_.ttl,
                       core_->metadata_for(options_, campaign_),
                       options_.wait,
                       deadline_,
                       stop_.get_token(),
                       core_->options().io_timeout,
                       options_.shared,
                       campaign_};
  }

  void acquire_on_server() {
    // The backend's own wait takes one stop: the caller's or the Client's closing.
    stop_on_stop_.emplace(options_.stop, [this] { stop_.request_stop(); });
    stop_on_closing_.emplace(core_->closing(), [this] { stop_.request_stop(); });
    ServerQueue& queue = *core_->backend().server_queue();
    if (!waits_) return granted(queue.acquire_queued(call()));
    try {
      std::thread([self = shared_from_this(), &queue] {
        name_this_thread("fl-wait");
        Result<Grant> grant = queue.acquire_queued(self->call());
        self->core_->engine().post(
            [self, grant = std::move(grant)]() mutable { self->granted(std::move(grant)); });
      }).detach();
    } catch (const std::system_error& e) {
      finish(Status(Code::kUnavailable, fmt::format("no thread to wait on: {}", e.what())));
    }
  }

  // On an engine thread.
  void try_once() {
    if (cancelled()) return give_up(Status(Code::kCancelled, "acquisition cancelled"));
    const Clock::time_point now = Clock::now();
    const milliseconds queue_for =
        waits_
            ? std::clamp(std::chrono::ceil<milliseconds>(deadline_ - now), milliseconds(1), hold_)
            : milliseconds(0);
    Backend& backend = core_->backend();
    if (BatchedTries* batched = backend.batched_tries();
        batched != nullptr && batched->batches_tries(options_.ttl)) {
      // With the tries of other acquisitions that come due now: one write per server.
      core_->tries().submit(
          TryBatcher::Request{key_, owner_, options_.ttl, core_->metadata_for(options_, campaign_),
                              queue_for, start_ticket_,
                              request_budget(core_->options().io_timeout)},
          [self = shared_from_this()](TryResult attempt) { self->after_try(std::move(attempt)); });
      return;
    }
    after_try(backend.try_acquire(
        GrantRequest{key_, owner_, options_.ttl, core_->metadata_for(options_, campaign_),
                     queue_for, start_ticket_},
        request_deadline(core_->options().io_timeout)));
  }

  // On an engine thread: what the try gave.
  void after_try(TryResult attempt) {
    if (attempt.grant) {
      attempt.grant->contended = attempt.grant->contended || found_held_;
      return granted(std::move(*attempt.grant));
    }
    // Errors: the backend already released what the try took; leave the queue place too.
    if (attempt.status.code() != Code::kLocked) return give_up(attempt.status);
    found_held_ = true;
    const Clock::time_point after = Clock::now();
    if (after >= deadline_) {
      if (!waits_) return finish(attempt.status);
      return give_up(Status(Code::kLocked, fmt::format("key is still held after waiting {}",
                                                       format_duration(options_.wait))));
    }
    if (cancelled()) return give_up(Status(Code::kCancelled, "acquisition cancelled"));
    // The fallback, as in the blocking loop: the holder's remaining TTL.
    const milliseconds fallback = attempt.retry_after + milliseconds(1);
    MutexLock lock(mu_);
    if (event_seen_) {  // a release or a stop came during the try: try again (or give up) now
      event_seen_ = false;
      core_->engine().post([self = shared_from_this()] { self->try_once(); });
      return;
    }
    phase_ = Phase::kWaiting;
    std::weak_ptr<AsyncAcquire> weak = weak_from_this();
    // The id reaches the task through a cell, written before mu_ is let go and read under it:
    // it is known only once post_at returned.
    auto id = std::make_shared<Engine::TimerId>(0);
    timer_ = core_->engine().post_at(std::min(deadline_, after + fallback), [weak, id] {
      if (auto self = weak.lock()) self->on_timer(*id);
    });
    *id = timer_;
  }

  // From the thread that heard a release of the key (keep it short).
  void on_release_event() {
    MutexLock lock(mu_);
    if (phase_ == Phase::kTrying) event_seen_ = true;
    if (phase_ == Phase::kWaiting) wake_locked();
  }

  // `id`: the timer that fired (read under mu_, after its writer let go); one that was replaced
  // (its cancel came too late to stop it) is stale.
  void on_timer(const Engine::TimerId& id) {
    MutexLock lock(mu_);
    if (phase_ != Phase::kWaiting || id != timer_) return;
    timer_ = 0;
    wake_locked();
  }

  void wake_locked() FENCELOCK_REQUIRES(mu_) {
    phase_ = Phase::kTrying;
    if (timer_ != 0) core_->engine().cancel(timer_);
    timer_ = 0;
    core_->engine().post([self = shared_from_this()] { self->try_once(); });
  }

  // Leaves the backend's queue (release by owner id also covers an ambiguous try), then ends.
  void give_up(Status status) {
    if (waits_) {
      (void)core_->backend().release(key_, owner_, Clock::now() + core_->options().io_timeout);
    }
    finish(std::move(status));
  }

  void granted(Result<Grant> grant) {
    if (!grant.ok()) return finish(grant.status());
    bool contended = contended_;
    Outcome lease = core_->lease_from_grant(key_, owner_, options_, std::move(*grant),
                                            granted_before_, contended);
    contended_ = contended;
    finish(std::move(lease));
  }

  // Ends on an engine thread later: never inside acquire_async itself.
  void finish_later(Status status) {
    core_->engine().post([self = shared_from_this(), status = std::move(status)]() mutable {
      self->finish(std::move(status));
    });
  }

  // On an engine thread: the line is left (waking the next), then `done` runs once.
  void finish(Outcome outcome) {
    std::optional<LocalQueue::Ticket> ticket;
    std::unique_ptr<ReleaseWatch> watch;
    {
      MutexLock lock(mu_);
      if (done_called_) return;
      done_called_ = true;
      phase_ = Phase::kDone;
      if (timer_ != 0) core_->engine().cancel(timer_);
      timer_ = 0;
      if (ticket_) {
        ticket.emplace(std::move(*ticket_));
        ticket_.reset();
      }
    }
    watch = std::move(watch_);
    {
      MutexLock lock(waker_cell_->mu);  // waits for a waker under way
      waker_cell_->op = nullptr;
    }
    std::shared_ptr<AsyncAcquire> self = std::move(keep_alive_);  // this lives to the end
    Outcome recorded =
        core_->record_acquire(key_, std::move(outcome), waits_, Clock::now() - start_, contended_);
    watch.reset();
    ticket.reset();
    core_->callback_begin();
    done_(std::move(recorded));
    core_->callback_end();
  }

  using Callback = std::stop_callback<std::function<void()>>;

  std::shared_ptr<AsyncAcquire> keep_alive_;  // while pending (set by start, taken by finish)
  // What the release-event waker reaches this by: a pointer that finish() clears.
  struct WakerCell {
    Mutex mu;
    AsyncAcquire* op FENCELOCK_GUARDED_BY(mu) = nullptr;
  };
  const std::shared_ptr<WakerCell> waker_cell_ = std::make_shared<WakerCell>();
  const std::shared_ptr<ClientCore> core_;
  const LockKey key_;
  const AcquireOptions options_;
  const bool campaign_;
  const ClientCore::AcquireDone done_;
  const Clock::time_point start_;
  const Clock::time_point deadline_;
  const bool waits_;
  const milliseconds hold_;
  // The place in the backend's FIFO queue: arrival time, the same on every retry and instance.
  const std::uint64_t start_ticket_ = static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  const OwnerId owner_ = OwnerId::random();
  // Set before the first try, then used by one step at a time (each posted after the last).
  std::uint64_t granted_before_ = 0;
  std::unique_ptr<ReleaseWatch> watch_;
  bool found_held_ = false;
  bool contended_ = false;
  std::stop_source stop_;  // acquire_on_server's
  std::optional<Callback> stop_on_stop_, stop_on_closing_;

  mutable Mutex mu_;
  Phase phase_ FENCELOCK_GUARDED_BY(mu_) = Phase::kQueued;
  bool event_seen_ FENCELOCK_GUARDED_BY(mu_) = false;
  bool done_called_ FENCELOCK_GUARDED_BY(mu_) = false;
  Engine::TimerId timer_ FENCELOCK_GUARDED_BY(mu_) = 0;
  std::optional<LocalQueue::Ticket> ticket_ FENCELOCK_GUARDED_BY(mu_);
  // The caller's stop and the Client's closing call cancel(); destroyed with this object (they
  // hold it only weakly).
  std::optional<Callback> on_stop_, on_closing_;
};

}  // namespace

void ClientCore::acquire_async(const LockKey& key, const AcquireOptions& options, AcquireDone done,
                               bool campaign) {
  auto op =
      std::make_shared<AsyncAcquire>(shared_from_this(), key, options, campaign, std::move(done));
  op->start();
}

}  // namespace fencelock::detail
