// Engine: the fixed set of threads on which a Client runs its asynchronous work (acquire_async,
// release_async): posted tasks and timers. Its size never depends on how many acquisitions are
// pending, leases held or keys used: a pending acquisition is state, a timer and a subscription
// to release events, not a thread.
//
// Tasks run in the order posted (per thread: the threads take tasks from one queue). A task may
// post more tasks and set timers. Timers run their task on one of the threads at (or soon after)
// their time unless cancelled first.
//
// The engine may be destroyed from one of its own threads (the last reference to a Client dropped
// inside a completion): that thread finishes its task and exits without touching the Engine.
//
// Thread-safety: all methods may be called concurrently, from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace fencelock::detail {

class Engine {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<void()>;
  using TimerId = std::uint64_t;

  explicit Engine(int threads);
  // Drops what has not run yet and joins the threads (detaches the calling one, if it is one).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void post(Task task);
  // Runs `task` at `at` (at once if it has passed) unless cancel() takes it back first.
  TimerId post_at(Clock::time_point at, Task task);
  // True if the timer had not run and now never will.
  bool cancel(TimerId id);

  int threads() const { return static_cast<int>(threads_.size()); }
  // Whether the caller runs on one of this engine's threads.
  bool on_engine_thread() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace fencelock::detail
