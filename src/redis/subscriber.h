// Release notifications over Redis pub/sub: how waiters wake without polling.
//
// The release script PUBLISHes on the key's channel. A ReleaseHub keeps, per channel, how many
// local waiters want it and a counter of releases seen; one Subscriber thread per instance holds
// one subscribed connection and SUBSCRIBEs / UNSUBSCRIBEs as the set of wanted channels changes.
// A Watch (one waiting acquisition) registers its channel, waits until every connected instance
// confirmed the subscription, and from then on cannot miss a release.
//
// When a subscriber's connection drops, it reconnects with backoff and resubscribes, and every
// waiter is woken once to retry (releases may have been missed meanwhile).
//
// Thread-safety: everything here is safe for concurrent use.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "redis/connection.h"

namespace fencelock::detail::redis {

class Subscriber;

class ReleaseHub {
 public:
  ReleaseHub(std::vector<ConnectSpec> instances, milliseconds confirm_timeout);
  ~ReleaseHub();

  // A watch on `channel` for the waiter `owner` (hex); subscribing happens before this returns
  // (bounded by confirm_timeout). It wakes for releases addressed to `owner` or to nobody.
  std::unique_ptr<ReleaseWatch> watch(const std::string& channel, const std::string& owner);

  // Called by Subscriber threads.
  // `instance` is now subscribed to `channel` (the reply to its last SUBSCRIBE arrived and no
  // UNSUBSCRIBE followed it) / is about to unsubscribe.
  void on_subscribed(int instance, const std::string& channel);
  void on_unsubscribing(int instance, const std::string& channel);
  // `payload`: the owner id of the waiter the release is addressed to, or empty.
  void on_message(const std::string& channel, const std::string& payload);
  void on_connection(int instance, bool up);
  void on_connect_failed(int instance);
  // Channels currently wanted (for a Subscriber to reconcile with what it has).
  std::set<std::string> wanted() const;

 private:
  friend class HubWatch;
  struct Channel {
    int watchers = 0;
    std::uint64_t releases = 0;                      // addressed to nobody in particular
    std::map<std::string, std::uint64_t> addressed;  // per waiter owner id
  };
  void add(const std::string& channel);
  void remove(const std::string& channel);
  bool wait_release(const std::string& channel, const std::string& owner, std::uint64_t& seen,
                    Clock::time_point until, std::stop_token stop);
  // Events that concern `owner` on `ch` so far (REQUIRES: mu_ held).
  std::uint64_t events_for(Channel& ch, const std::string& owner) const;

  const milliseconds confirm_timeout_;
  mutable std::mutex mu_;
  std::condition_variable_any changed_;
  std::map<std::string, Channel> channels_;  // GUARDED_BY(mu_)
  std::map<std::string, std::set<int>> subscribed_on_;  // GUARDED_BY(mu_): channel -> instances
  std::set<int> connected_;                  // GUARDED_BY(mu_)
  std::set<int> attempted_;                  // GUARDED_BY(mu_): instances tried at least once
  std::uint64_t reconnects_ = 0;             // GUARDED_BY(mu_); wakes every waiter when it moves
  const std::vector<ConnectSpec> instances_;
  std::once_flag started_;  // subscriber threads start with the first watch
  std::vector<std::unique_ptr<Subscriber>> subscribers_;
};

// One subscribed connection to one instance, served by its own thread.
class Subscriber {
 public:
  Subscriber(int index, ConnectSpec spec, ReleaseHub& hub);
  ~Subscriber();
  // Wakes the thread to reconcile its subscriptions with hub.wanted().
  void poke();

 private:
  void run(std::stop_token stop);
  bool serve(std::stop_token stop, redisContext* c);
  // Per channel, on the current connection: SUBSCRIBE/UNSUBSCRIBE sent and not yet answered,
  // and whether the last one sent was a SUBSCRIBE. Only this thread touches it.
  struct Sent {
    int unanswered = 0;
    bool subscribe = false;
  };
  bool reconcile(redisContext* c, std::map<std::string, Sent>& sent);
  void on_reply(std::string_view kind, const std::string& channel, std::map<std::string, Sent>& sent);

  const int index_;
  const ConnectSpec spec_;
  ReleaseHub& hub_;
  int wake_fd_ = -1;  // eventfd
  std::jthread thread_;
};

}  // namespace fencelock::detail::redis
