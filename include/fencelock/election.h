// fencelock/election.h: leader election over etcd, with the key layout of etcd's
// concurrency.Election (so `etcdctl elect NAME` and fencelock campaign in the same election).
//
//   auto client = fencelock::Client::connect("etcd://127.0.0.1:2379");
//   auto election = fencelock::Election::make(*client, "scheduler");
//   auto leadership = election->campaign("node-a:8080");  // blocks until elected
//   if (leadership) { serve_as_leader(leadership->token(), leadership->lost()); }
//
// A campaign is an acquisition of the lock NAME that stores VALUE (verbatim, as etcd's election
// does) in the campaigner's key NAME/<lease hex>: the campaigner with the lowest create revision
// leads, and that create revision is the leadership's fencing token (every new term has a larger
// one). Leadership is renewed like any Lease and fires lost() by the same rules; resign() (or
// the destructor) deletes the key and hands leadership to the next campaigner in line.
//
// Only etcd:// backends offer elections; on any other backend make() returns kInvalidArgument.
// (A lock held with the same name is the same thing in etcd: don't mix the two on one name.)
//
// Thread-safety: an Election is safe for concurrent use (it is a name plus a Client). A
// Leadership follows Lease's rules: const methods from any thread, resign() and the destructor
// not concurrently with each other or with proclaim().
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "fencelock/client.h"
#include "fencelock/lease.h"
#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

// The leader of an election as the servers see it.
struct LeaderInfo {
  // The leader's etcd key, "NAME/<lease hex>": the server's key of this campaigner, not a lock
  // name (up to LockKey::kMaxBytes + 17 bytes), hence a string and not a LockKey.
  std::string key;
  std::string value;      // what the leader proclaimed (verbatim)
  FencingToken token{0};  // create revision of the leader's key: larger for every new term
};

struct CampaignOptions {
  // Session time to live of the campaigner (and of the leadership once elected). Default 10 s;
  // at least 2 s (etcd leases have whole-second TTLs).
  std::chrono::milliseconds ttl{10'000};
  // How long to wait for the leadership. Default: a year, i.e. until elected or stopped.
  // 0: become leader only if nobody leads now (kLocked otherwise).
  std::chrono::milliseconds wait = std::chrono::hours(24 * 365);
  // Cancels the campaign (kCancelled; the campaigner's key is deleted). Default: never.
  std::stop_token stop;
};

class Leadership {
 public:
  // REQUIRES for every method: not moved from.
  const std::string& election() const { return name_; }
  FencingToken token() const { return lease_.token(); }
  // Fires when the session can no longer be confirmed (as Lease::lost()) or on resign(). A
  // leader key deleted by someone else (`etcdctl del`) is noticed by the next proclaim()
  // (kLocked), as with etcd's own Election; resources should check token() (fence.h).
  std::stop_token lost() const { return lease_.lost(); }
  bool is_lost() const { return lease_.is_lost(); }
  std::chrono::steady_clock::time_point valid_until() const { return lease_.valid_until(); }
  // The underlying grant (token, validity, on_lost).
  const Lease& lease() const { return lease_; }

  // Replaces the leader's value, only while this is still the leader (compare create revision,
  // then put). kLocked when the leadership is gone; kUnavailable when etcd cannot be reached.
  Status proclaim(std::string_view value);

  // Deletes the leader key (compare create revision) so that the next campaigner leads.
  // OK when already gone. After resign() lost() has fired.
  Status resign() { return lease_.release(); }

 private:
  friend class Election;
  Leadership(Client client, std::string name, Lease lease)
      : client_(std::move(client)), name_(std::move(name)), lease_(std::move(lease)) {}
  Client client_;
  std::string name_;
  Lease lease_;
};

class Election {
 public:
  // `name` follows LockKey's rules (1..512 bytes, no NUL). kInvalidArgument for a bad name or a
  // Client whose backend is not etcd.
  static Result<Election> make(const Client& client, std::string_view name);

  const std::string& name() const { return name_.str(); }

  // Joins the line of campaigners with `value` and blocks until elected (the Leadership), the
  // wait runs out (kLocked), options.stop fires (kCancelled) or etcd fails (kUnavailable,
  // kDeadlineExceeded). Nothing of this campaign is left on the servers when it fails.
  Result<Leadership> campaign(std::string_view value, const CampaignOptions& options = {});

  // The current leader, or nullopt when nobody campaigns.
  Result<std::optional<LeaderInfo>> leader();

  // Calls `on_change` with the current leader (nullopt: none) at once, then after every change of
  // leader or of the leader's value, until `stop` fires (returns OK). Rides out member failures:
  // it returns an error only when no member answers for the Client's whole failover budget.
  // The callback runs on the calling thread; it must not block for long.
  Status observe(const std::function<void(const std::optional<LeaderInfo>&)>& on_change,
                 std::stop_token stop);

 private:
  Election(Client client, LockKey name) : client_(std::move(client)), name_(std::move(name)) {}
  Client client_;
  LockKey name_;
};

}  // namespace fencelock
