#include "redis/subscriber.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace fencelock::detail::redis {

class HubWatch final : public ReleaseWatch {
 public:
  HubWatch(ReleaseHub& hub, std::string channel, std::string owner, std::uint64_t seen)
      : hub_(hub), channel_(std::move(channel)), owner_(std::move(owner)), seen_(seen) {}
  ~HubWatch() override { hub_.remove(channel_); }
  bool wait_until(Clock::time_point until, std::stop_token stop) override {
    return hub_.wait_release(channel_, owner_, seen_, until, std::move(stop));
  }

 private:
  ReleaseHub& hub_;
  std::string channel_;
  std::string owner_;
  std::uint64_t seen_;
};

ReleaseHub::ReleaseHub(std::vector<ConnectSpec> instances, milliseconds confirm_timeout)
    : confirm_timeout_(confirm_timeout), instances_(std::move(instances)) {}

ReleaseHub::~ReleaseHub() { subscribers_.clear(); }

std::unique_ptr<ReleaseWatch> ReleaseHub::watch(const std::string& channel, const std::string& owner) {
  add(channel);
  std::call_once(started_, [&] {
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      subscribers_.push_back(std::make_unique<Subscriber>(static_cast<int>(i), instances_[i], *this));
    }
  });
  for (auto& s : subscribers_) s->poke();
  std::unique_lock lock(mu_);
  Channel& ch = channels_[channel];
  // Wait until every instance was tried once and every connected one confirmed (instances that
  // are down cannot publish to us either; the holder's TTL is the fallback for them).
  changed_.wait_for(lock, confirm_timeout_, [&] {
    const std::set<int>& on = subscribed_on_[channel];
    return attempted_.size() == instances_.size() &&
           std::includes(on.begin(), on.end(), connected_.begin(), connected_.end());
  });
  return std::make_unique<HubWatch>(*this, channel, owner, events_for(ch, owner));
}

void ReleaseHub::add(const std::string& channel) {
  std::lock_guard lock(mu_);
  channels_[channel].watchers++;
}

void ReleaseHub::remove(const std::string& channel) {
  {
    std::lock_guard lock(mu_);
    auto it = channels_.find(channel);
    if (--it->second.watchers > 0) return;
    channels_.erase(it);
  }
  for (auto& s : subscribers_) s->poke();
}

std::uint64_t ReleaseHub::events_for(Channel& ch, const std::string& owner) const {
  auto it = ch.addressed.find(owner);
  return ch.releases + reconnects_ + (it == ch.addressed.end() ? 0 : it->second);
}

bool ReleaseHub::wait_release(const std::string& channel, const std::string& owner,
                              std::uint64_t& seen, Clock::time_point until, std::stop_token stop) {
  std::unique_lock lock(mu_);
  Channel& ch = channels_[channel];
  auto now_seen = [&] { return events_for(ch, owner); };
  bool woke = changed_.wait_until(lock, stop, until, [&] { return now_seen() != seen; });
  seen = now_seen();
  return woke;
}

void ReleaseHub::on_subscribed(int instance, const std::string& channel) {
  std::lock_guard lock(mu_);
  subscribed_on_[channel].insert(instance);
  changed_.notify_all();
}

void ReleaseHub::on_unsubscribing(int instance, const std::string& channel) {
  std::lock_guard lock(mu_);
  auto it = subscribed_on_.find(channel);
  if (it == subscribed_on_.end()) return;
  it->second.erase(instance);
  if (it->second.empty()) subscribed_on_.erase(it);
}

void ReleaseHub::on_message(const std::string& channel, const std::string& payload) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  if (payload.empty()) {
    it->second.releases++;
  } else {
    it->second.addressed[payload]++;  // only that waiter wakes; the others keep sleeping
  }
  changed_.notify_all();
}

void ReleaseHub::on_connect_failed(int instance) {
  std::lock_guard lock(mu_);
  attempted_.insert(instance);
  changed_.notify_all();
}

void ReleaseHub::on_connection(int instance, bool up) {
  std::lock_guard lock(mu_);
  attempted_.insert(instance);
  if (up) {
    connected_.insert(instance);
  } else {
    connected_.erase(instance);
    for (auto it = subscribed_on_.begin(); it != subscribed_on_.end();) {
      it->second.erase(instance);
      it = it->second.empty() ? subscribed_on_.erase(it) : std::next(it);
    }
  }
  reconnects_++;  // every waiter retries once: a release may have gone unheard
  changed_.notify_all();
}

std::set<std::string> ReleaseHub::wanted() const {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [name, _] : channels_) out.insert(name);
  return out;
}

Subscriber::Subscriber(int index, ConnectSpec spec, ReleaseHub& hub)
    : index_(index), spec_(std::move(spec)), hub_(hub) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

Subscriber::~Subscriber() {
  thread_.request_stop();
  poke();
  if (thread_.joinable()) thread_.join();
  close(wake_fd_);
}

void Subscriber::poke() {
  std::uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof one);
  (void)n;
}

void Subscriber::run(std::stop_token stop) {
  milliseconds backoff(0);
  while (!stop.stop_requested()) {
    auto opened = open_context(spec_, Clock::now() + spec_.connect_timeout);
    if (opened.ok()) {
      backoff = milliseconds(0);
      hub_.on_connection(index_, true);
      serve(stop, opened->get());
      hub_.on_connection(index_, false);
      continue;
    }
    hub_.on_connect_failed(index_);
    backoff = std::clamp(backoff * 2, milliseconds(25), milliseconds(1000));
    pollfd pfd{wake_fd_, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(backoff.count()));  // wait out the backoff, or until stopped
    std::uint64_t drained;
    ssize_t n = read(wake_fd_, &drained, sizeof drained);
    (void)n;
  }
}

// Sends SUBSCRIBE / UNSUBSCRIBE so that the channels asked for match what the hub wants.
bool Subscriber::reconcile(redisContext* c, std::map<std::string, Sent>& sent) {
  std::set<std::string> wanted = hub_.wanted();
  std::vector<std::string> add = {"SUBSCRIBE"};
  std::vector<std::string> drop = {"UNSUBSCRIBE"};
  for (const auto& channel : wanted) {
    auto it = sent.find(channel);
    if (it == sent.end() || !it->second.subscribe) add.push_back(channel);
  }
  for (const auto& [channel, state] : sent) {
    if (state.subscribe && !wanted.contains(channel)) drop.push_back(channel);
  }
  for (std::size_t i = 1; i < add.size(); ++i) {
    Sent& s = sent[add[i]];
    s.unanswered++;
    s.subscribe = true;
  }
  for (std::size_t i = 1; i < drop.size(); ++i) {
    hub_.on_unsubscribing(index_, drop[i]);  // before sending: a stale confirmation must not count
    Sent& s = sent[drop[i]];
    s.unanswered++;
    s.subscribe = false;
  }
  for (auto* cmd : {&add, &drop}) {
    if (cmd->size() == 1) continue;
    std::string wire = format_command(*cmd);
    redisAppendFormattedCommand(c, wire.data(), wire.size());
  }
  int done = 0;
  while (!done) {
    if (redisBufferWrite(c, &done) == REDIS_ERR) return false;
  }
  return true;
}

void Subscriber::on_reply(std::string_view kind, const std::string& channel,
                          std::map<std::string, Sent>& sent) {
  if (kind == "message") return;
  auto it = sent.find(channel);
  if (it == sent.end() || --it->second.unanswered > 0) return;  // a newer command is in flight
  if (it->second.subscribe) {
    hub_.on_subscribed(index_, channel);
  } else {
    sent.erase(it);
  }
}

bool Subscriber::serve(std::stop_token stop, redisContext* c) {
  std::map<std::string, Sent> sent;
  while (!stop.stop_requested()) {
    if (!reconcile(c, sent)) return false;
    pollfd fds[2] = {{c->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents) {
      std::uint64_t drained;
      ssize_t n = read(wake_fd_, &drained, sizeof drained);
      (void)n;
    }
    if (fds[0].revents == 0) continue;
    if (redisBufferRead(c) == REDIS_ERR) return false;
    while (true) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(c, &raw) == REDIS_ERR) return false;
      if (raw == nullptr) break;
      Reply reply(static_cast<redisReply*>(raw));
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2) continue;
      std::string_view kind(reply->element[0]->str, reply->element[0]->len);
      std::string channel(reply->element[1]->str, reply->element[1]->len);
      if (kind == "message" && reply->elements == 3) {
        hub_.on_message(channel, std::string(reply->element[2]->str, reply->element[2]->len));
      }
      on_reply(kind, channel, sent);
    }
  }
  return true;
}

}  // namespace fencelock::detail::redis
