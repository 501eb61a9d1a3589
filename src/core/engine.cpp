#include "core/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <utility>

#include "core/mutex.h"
#include "core/thread_name.h"

namespace fencelock::detail {

struct Engine::State {
  Mutex mu;
  std::condition_variable_any changed;
  std::deque<Task> ready FENCELOCK_GUARDED_BY(mu);
  // Timers by (time, id): the earliest first; ids are unique, so equal times keep post order.
  std::map<std::pair<Clock::time_point, TimerId>, Task> timers FENCELOCK_GUARDED_BY(mu);
  std::map<TimerId, Clock::time_point> timer_at FENCELOCK_GUARDED_BY(mu);
  TimerId next_timer FENCELOCK_GUARDED_BY(mu) = 1;
  bool stopping FENCELOCK_GUARDED_BY(mu) = false;
  std::vector<std::thread::id> ids FENCELOCK_GUARDED_BY(mu);

  // Runs tasks until stopping. Holds `self` so that a thread detached by ~Engine outlives it.
  static void run(const std::shared_ptr<State>& self) {
    State& s = *self;
    MutexLock lock(s.mu);
    while (!s.stopping) {
      const Clock::time_point now = Clock::now();
      // Timers that are due become ready tasks, in time order.
      while (!s.timers.empty() && s.timers.begin()->first.first <= now) {
        auto node = s.timers.extract(s.timers.begin());
        s.timer_at.erase(node.key().second);
        s.ready.push_back(std::move(node.mapped()));
      }
      if (s.ready.empty()) {
        if (s.timers.empty()) {
          s.changed.wait(lock);
        } else {
          // A copy: wait_until reads its deadline by reference while the lock is let go, and
          // another thread may take that timer out of the map meanwhile.
          const Clock::time_point next = s.timers.begin()->first.first;
          s.changed.wait_until(lock, next);
        }
        continue;
      }
      Task task = std::move(s.ready.front());
      s.ready.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // what it captured goes before the lock is taken again
      lock.lock();
    }
  }
};

Engine::Engine(int threads) : state_(std::make_shared<State>()) {
  threads_.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([state = state_] {
      name_this_thread("fl-engine");
      State::run(state);
    });
  }
  MutexLock lock(state_->mu);
  for (const std::thread& t : threads_) state_->ids.push_back(t.get_id());
}

Engine::~Engine() {
  std::deque<Task> dropped;
  std::map<std::pair<Clock::time_point, TimerId>, Task> dropped_timers;
  {
    MutexLock lock(state_->mu);
    state_->stopping = true;
    dropped.swap(state_->ready);
    dropped_timers.swap(state_->timers);
    state_->timer_at.clear();
  }
  state_->changed.notify_all();
  for (std::thread& t : threads_) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // this thread runs the task that is destroying us; it exits after it
    } else {
      t.join();
    }
  }
  // The dropped tasks are destroyed here, after the threads: what they hold may own this Engine's
  // owner only through them.
}

void Engine::post(Task task) {
  {
    MutexLock lock(state_->mu);
    if (state_->stopping) return;
    state_->ready.push_back(std::move(task));
  }
  state_->changed.notify_one();
}

Engine::TimerId Engine::post_at(Clock::time_point at, Task task) {
  TimerId id;
  {
    MutexLock lock(state_->mu);
    if (state_->stopping) return 0;
    id = state_->next_timer++;
    state_->timers.emplace(std::make_pair(at, id), std::move(task));
    state_->timer_at.emplace(id, at);
  }
  // Every thread may be waiting for a later timer: one of them must look again.
  state_->changed.notify_all();
  return id;
}

bool Engine::cancel(TimerId id) {
  Task dropped;
  {
    MutexLock lock(state_->mu);
    auto it = state_->timer_at.find(id);
    if (it == state_->timer_at.end()) return false;
    auto node = state_->timers.extract(std::make_pair(it->second, id));
    dropped = std::move(node.mapped());
    state_->timer_at.erase(it);
  }
  return true;  // `dropped` is destroyed outside the lock
}

bool Engine::on_engine_thread() const {
  MutexLock lock(state_->mu);
  return std::find(state_->ids.begin(), state_->ids.end(), std::this_thread::get_id()) !=
         state_->ids.end();
}

}  // namespace fencelock::detail
