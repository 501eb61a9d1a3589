// Wake-ups over Redis pub/sub: how waiters learn of a release without polling, and without a
// thundering herd.
//
// Every Client has one wake channel, "fencelock:wake:<client id>", and one subscriber thread
// ("fl-subscribe") that keeps one connection per instance subscribed to it for the Client's whole
// life, all from one poll() loop: connects, setup, SUBSCRIBE, heartbeats and messages of every
// instance progress together, so a stopped or dripping instance delays no other's wake-ups. A
// waiting acquisition records the channel next to its place in the key's wait queue; the release
// script publishes the owner id of the first waiter in line on that waiter's channel. So a
// release wakes exactly one waiter, in exactly one process, and waiting costs no SUBSCRIBE per
// wait.
//
// A Watch registers its owner id with the ReleaseHub, waits (once per Client) until every
// connected instance confirmed the subscription, and from then on cannot miss a wake-up. When a
// subscriber's connection drops, it reconnects with backoff and resubscribes, and every waiter is
// woken once to retry (wake-ups may have been lost meanwhile).
//
// Places in line need no refresh by their waiters: while the Client has waiters, the hub keeps
// the key "<wake channel>:alive" on every instance (kAliveFor, refreshed every kAliveEvery). The
// same loop writes it, on a connection of its own per instance (PolledCall), each instance's write
// bounded by the earlier of io_timeout and kAliveEvery and waiting for no other's; a place lives
// while its Client is alive (scripts/queue.lua). A wake-up for an owner id that has no waiter
// here (its leave of the queue never arrived) is handed to the stray handler, which sends the
// leave again.
//
// Thread-safety: everything here is safe for concurrent use.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/mutex.h"
#include "core/wake_board.h"
#include "redis/connection.h"

namespace fencelock::detail::redis {

class ReleaseHub {
 public:
  // How long the Client's liveness key lasts, and how often it is refreshed while the Client
  // has waiters.
  static constexpr milliseconds kAliveFor{5000};
  static constexpr milliseconds kAliveEvery{1500};

  // A wake-up on `instance` for `owner`, who has no waiter here, in the queue of `lock_key`.
  using StrayHandler =
      std::function<void(int instance, const std::string& owner, const std::string& lock_key)>;

  ReleaseHub(std::vector<ConnectSpec> instances, std::string wake_channel,
             milliseconds confirm_timeout);
  ~ReleaseHub();

  // Before the first watch: the instances the liveness key is written to (each write bounded by
  // `io_timeout`) and what to do with a stray wake-up. Without it (tests), neither happens.
  // REQUIRES: the instances and whatever `stray` uses outlive this hub, or stop() is called
  // before they go.
  void attach(std::vector<Instance*> instances, milliseconds io_timeout, StrayHandler stray);
  // Stops the subscriber thread (idempotent; the destructor calls it). Its last act: deleting the
  // liveness key where it was stored, within the earlier of io_timeout and kAliveEvery.
  void stop();

  // The channel the release script publishes on to wake this Client's waiters.
  const std::string& wake_channel() const { return wake_channel_; }
  // The key that says this Client is alive (scripts/queue.lua).
  std::string alive_key() const { return wake_channel_ + ":alive"; }

  // A watch for the waiter `owner` (hex). The first watch starts the subscriber thread and waits
  // (bounded by confirm_timeout and `deadline`) until every connected instance confirmed the
  // subscription.
  std::unique_ptr<ReleaseWatch> watch(const std::string& owner, Clock::time_point deadline);
  // Closes the eventfd, as if eventfd() had failed at construction (out of descriptors): for a
  // test of the loop without it. Before the first watch() only.
  void drop_wake_fd_for_testing();

 private:
  // What the loop (run) reports.
  void on_subscribed(int instance);
  // payload: "<owner id woken> <lock key>" (or the owner id alone).
  void on_message(int instance, const std::string& payload);
  void on_connection(int instance, bool up);
  void on_connect_failed(int instance);

  struct Feed;  // one instance's subscribed connection (the loop's)
  struct Beat;  // one instance's liveness write (the loop's)

  // The loop: runs until stop(), then deletes the liveness key where it was stored.
  void run(const std::stop_token& stop);
  void wake_loop();

  const std::string wake_channel_;
  const milliseconds confirm_timeout_;
  const std::vector<ConnectSpec> instances_;
  WakeBoard board_;  // wake-ups by owner id
  mutable Mutex mu_;
  std::condition_variable_any ready_;
  std::set<int> subscribed_on_ FENCELOCK_GUARDED_BY(mu_);
  std::set<int> connected_ FENCELOCK_GUARDED_BY(mu_);
  std::set<int> attempted_ FENCELOCK_GUARDED_BY(mu_);  // instances tried at least once
  bool alive_due_ FENCELOCK_GUARDED_BY(mu_) = false;   // a watch came after an idle spell
  std::once_flag started_;                             // the loop starts with the first watch

  // The liveness key's writes (attach()).
  std::vector<Instance*> alive_on_;
  milliseconds io_timeout_{1000};
  StrayHandler stray_;

  int wake_fd_ = -1;  // eventfd: a watch or stop() interrupts the loop's poll()
  std::jthread loop_;
};

}  // namespace fencelock::detail::redis
