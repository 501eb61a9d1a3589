#include "redis/release_finisher.h"

#include <algorithm>

#include "core/thread_name.h"

namespace fencelock::detail::redis {

void OwedReleases::add(const std::string& lock, const std::string& value, int instances,
                       Clock::time_point until) {
  MutexLock hold(mu_);
  const Clock::time_point now = Clock::now();
  // Forget locks whose values have all expired, oldest first, and keep the map bounded.
  while (!order_.empty() && (order_.front().second <= now || owed_.size() >= kMaxLocks)) {
    auto it = owed_.find(order_.front().first);
    if (it != owed_.end() &&
        (it->second.empty() || it->second.back().until <= now || owed_.size() >= kMaxLocks)) {
      owed_.erase(it);
    }
    order_.pop_front();
  }
  std::deque<Value>& values = owed_[lock];
  values.push_back({value, instances, until});
  if (values.size() > kPerLock) values.pop_front();
  order_.emplace_back(lock, until);
  locks_.store(owed_.size(), std::memory_order_release);
}

std::vector<std::string> OwedReleases::of(const std::string& lock, Clock::time_point now) {
  if (locks_.load(std::memory_order_acquire) == 0) return {};
  MutexLock hold(mu_);
  auto it = owed_.find(lock);
  if (it == owed_.end()) return {};
  std::vector<std::string> out;
  for (const Value& v : it->second) {
    if (v.until > now) out.push_back(v.value);
  }
  return out;
}

void OwedReleases::settled(const std::string& lock, const std::vector<std::string>& values) {
  MutexLock hold(mu_);
  auto it = owed_.find(lock);
  if (it == owed_.end()) return;
  std::erase_if(it->second, [&](const Value& v) {
    return std::find(values.begin(), values.end(), v.value) != values.end();
  });
  if (it->second.empty()) owed_.erase(it);
  locks_.store(owed_.size(), std::memory_order_release);
}

void OwedReleases::delivered(const std::string& lock, const std::string& value) {
  MutexLock hold(mu_);
  auto it = owed_.find(lock);
  if (it == owed_.end()) return;
  std::erase_if(it->second, [&](Value& v) { return v.value == value && --v.instances <= 0; });
  if (it->second.empty()) owed_.erase(it);
  locks_.store(owed_.size(), std::memory_order_release);
}

ReleaseFinisher::~ReleaseFinisher() {
  std::jthread thread;
  {
    MutexLock lock(mu_);
    thread = std::move(thread_);
  }
  if (thread.joinable()) {
    thread.request_stop();  // wakes the wait (it watches the stop token)
    thread.join();
  }
  std::vector<Job> left;
  milliseconds bound{0};
  {
    MutexLock lock(mu_);
    const Clock::time_point now = Clock::now();
    for (Job& job : jobs_) {
      if (job.until <= now) continue;
      bound = std::max(bound, job.per_try);
      left.push_back(std::move(job));
    }
    jobs_.clear();
  }
  // One last try of every job left, all at once: a Client that ends right after a release
  // still delivers it where it can.
  if (!left.empty()) (void)attempt(std::move(left), Clock::now() + bound);
}

void ReleaseFinisher::finish(Instance* instance, std::string lock, std::string value,
                             std::string command, Clock::time_point until, milliseconds per_try) {
  MutexLock hold(mu_);
  jobs_.push_back(Job{instance, std::move(lock), std::move(value), std::move(command), until,
                      per_try, Clock::now()});
  ++added_;
  if (!thread_.joinable()) {
    thread_ = std::jthread([this](const std::stop_token& stop) {
      name_this_thread("fl-finisher");
      run(stop);
    });
  }
  wake_.notify_all();
}

std::size_t ReleaseFinisher::pending() const {
  MutexLock lock(mu_);
  return jobs_.size() + running_;
}

std::vector<ReleaseFinisher::Job> ReleaseFinisher::attempt(std::vector<Job> jobs,
                                                           Clock::time_point deadline) {
  std::vector<InstanceCall> calls;
  std::vector<std::vector<std::size_t>> of_call;  // job indices per call, in command order
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    auto it = std::find_if(calls.begin(), calls.end(),
                           [&](const InstanceCall& c) { return c.instance == jobs[j].instance; });
    if (it == calls.end()) {
      calls.push_back(InstanceCall{jobs[j].instance, {}, {}, {}});
      of_call.emplace_back();
      it = calls.end() - 1;
    }
    it->commands.push_back(&jobs[j].command);
    of_call[static_cast<std::size_t>(it - calls.begin())].push_back(j);
  }
  fan_out(calls, deadline);
  std::vector<Job> unanswered;
  for (std::size_t c = 0; c < calls.size(); ++c) {
    for (std::size_t k = 0; k < of_call[c].size(); ++k) {
      Job& job = jobs[of_call[c][k]];
      // Replies that came before a failure count; an error reply (BUSY, LOADING, OOM) means the
      // script did not run: tried again.
      const bool ran =
          k < calls[c].replies.size() && calls[c].replies[k]->type != REDIS_REPLY_ERROR;
      if (ran) {
        if (owed_ != nullptr) owed_->delivered(job.lock, job.value);
      } else {
        unanswered.push_back(std::move(job));
      }
    }
  }
  return unanswered;
}

void ReleaseFinisher::run(const std::stop_token& stop) {
  MutexLock lock(mu_);
  auto has_jobs = [&]() FENCELOCK_REQUIRES(mu_) { return !jobs_.empty(); };
  while (!stop.stop_requested()) {
    if (jobs_.empty()) {
      wake_.wait(lock, stop, has_jobs);
      continue;
    }
    // Every job that is due, together; else wait for the first one (or a new job).
    const Clock::time_point now = Clock::now();
    Clock::time_point first = Clock::time_point::max();
    std::vector<Job> due;
    milliseconds bound{0};
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->next_try <= now) {
        bound = std::max(bound, it->per_try);
        due.push_back(std::move(*it));
        it = jobs_.erase(it);
      } else {
        first = std::min(first, it->next_try);
        ++it;
      }
    }
    if (due.empty()) {
      const std::uint64_t seen = added_;
      wake_.wait_until(lock, stop, first, [&]() FENCELOCK_REQUIRES(mu_) { return added_ != seen; });
      continue;
    }
    running_ += due.size();
    const std::size_t tried = due.size();
    lock.unlock();
    std::vector<Job> again = attempt(std::move(due), Clock::now() + bound);
    lock.lock();
    running_ -= tried;
    const Clock::time_point after = Clock::now();
    for (Job& job : again) {
      if (after + job.pause >= job.until) continue;  // the tombstone would be gone by then
      job.next_try = after + job.pause;
      job.pause = std::min(job.pause * 2, milliseconds(1000));
      jobs_.push_back(std::move(job));
    }
  }
}

}  // namespace fencelock::detail::redis
