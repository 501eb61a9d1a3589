#include "etcd/etcd_backend.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/fence_issuer.h"
#include "core/log_internal.h"
#include "core/mutex.h"
#include "core/quorum.h"
#include "etcd/etcd_connection.h"
#include "etcd/etcd_keys.h"
#include "etcd/etcd_own_keys.h"
#include "fencelock/fence.h"

namespace fencelock::detail {
namespace etcd {
namespace {

constexpr std::int64_t kPage = 8;  // keys read per page when looking for a lock's first key
constexpr int kMaxRestarts = 3;    // fresh sessions one acquisition may take before giving up

// One etcd lease shared by every lock of one TTL (in whole seconds) of this Client.
struct Session {
  std::int64_t id = 0;
  milliseconds ttl{0};
  std::atomic<Clock::rep> confirmed_ticks{0};  // send time of the last answered grant/keep-alive
  std::atomic<bool> dead{false};               // etcd said the lease is gone (or we revoked it)

  Clock::time_point confirmed() const {
    return Clock::time_point(Clock::duration(confirmed_ticks.load()));
  }
  void confirm(Clock::time_point sent) {
    Clock::rep ticks = sent.time_since_epoch().count();
    Clock::rep seen = confirmed_ticks.load();
    while (seen < ticks && !confirmed_ticks.compare_exchange_weak(seen, ticks)) {
    }
  }
};

// Held::revision of an own key that an ambiguous create (no answer) may have written: its
// revision is unknown, so delete_own_key() reads the key and compare-deletes the revision it
// found. Its (session, lock) slot stays taken until that delete succeeded, so no later
// acquisition of ours owns that key meanwhile; but a delete without a compare that reached etcd
// late (stuck in a member's queue past its deadline) would remove a later grant's key
// (models/etcd.pml, variant UNCOMPARED_DELETE).
constexpr std::int64_t kUnknownRevision = -1;

// An acquisition in progress or a grant: the own key and its create revision (0: not created).
struct Held {
  std::shared_ptr<Session> session;
  std::string name;
  std::string key;
  std::int64_t revision = 0;
  std::string value;  // what the create writes into the own key
};

// The creates of one (session, lock) slot that got no answer: each may still be applied, late
// (held in the network or in a member's queue past its deadline, or a copy that a failover
// retry sent), after its acquisition gave up and read that no key was there. Such a key would
// block the lock while the session lives, with nobody to release it. Every keep-alive of the
// session first looks for them (sweep_ghosts) until `until`.
struct Ghosts {
  std::shared_ptr<Session> session;
  std::string key;
  std::vector<std::pair<std::string, Clock::time_point>> values;  // value written, watched until
  std::uint64_t takes = 0;  // how often the slot was taken since the first ambiguous create
};

// The grants of one session in a renewal round: the indices of their RenewItems, and their keys.
struct HeldKeys {
  std::vector<std::size_t> items;
  std::vector<OwnKey> keys;
};

// The outcome of one acquisition on one session.
struct Attempt {
  Status status;
  std::optional<Grant> grant;
  bool restart = false;  // the session died under us: try again on a fresh one
};

bool lease_not_found(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::NOT_FOUND;
}

// Whether a write that failed with `status` may still have been applied (no answer, or a server
// error mid-way), as opposed to refused before it ran.
bool may_have_applied(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return false;
    default:
      return true;
  }
}

// Adds "create_revision(key) == revision" to the Txn's conditions (0: the key does not exist).
void compare_create_revision(pb::TxnRequest& request, const std::string& key,
                             std::int64_t revision) {
  pb::Compare* compare = request.add_compare();
  compare->set_key(key);
  compare->set_target(pb::Compare::CREATE);
  compare->set_result(pb::Compare::EQUAL);
  compare->set_create_revision(revision);
}

const pb::KeyValue* first_of_lock(const pb::RangeResponse& page, std::string_view name) {
  for (const auto& kv : page.kvs()) {
    if (lock_name_of(kv.key()) == name) return &kv;
  }
  return nullptr;
}

class EtcdBackend final : public Backend,
                          public ServerQueue,
                          public GuardedWrites,
                          public ElectionBackend {
 public:
  EtcdBackend(std::unique_ptr<EtcdConnection> connection, std::string description,
              std::size_t members, std::string key_namespace, std::string issuer_identity)
      : conn_(std::move(connection)),
        options_(conn_->options()),
        description_(std::move(description)),
        ns_(std::move(key_namespace)),
        issuer_identity_(std::move(issuer_identity)),
        op_budget_(options_.io_timeout * static_cast<int>(std::max<std::size_t>(members, 2))) {}

  ~EtcdBackend() override {
    MutexLock lock(sessions_mu_);
    for (auto& [_, session] : sessions_) {
      if (session) revoke(*session);
    }
  }

  milliseconds min_ttl() const override { return milliseconds(2000); }

  // A waiter waits on a watch of the key ahead of it (acquire_queued): no tries to repeat, no
  // release events needed.
  ServerQueue* server_queue() override { return this; }
  GuardedWrites* guarded_writes() override { return this; }

  Result<Grant> acquire_queued(const AcquireCall& outer) override {
    auto key = in_namespace(outer.key);
    if (!key.ok()) return key.status();
    AcquireCall call{*key,           outer.owner, outer.ttl,        outer.metadata, outer.wait,
                     outer.deadline, outer.stop,  outer.io_timeout, outer.shared,   outer.campaign};
    call.io_until = outer.io_until;
    for (int restarts = 0;; ++restarts) {
      if (restarts > kMaxRestarts)
        return Status(Code::kUnavailable, "the etcd session was lost repeatedly");
      auto session = session_for(call.ttl, call.io_until);
      if (!session.ok()) return session.status();
      if (Status slot = take_slot(*session, call); !slot.ok()) return slot;
      Attempt attempt = acquire_on(call, *session);
      if (attempt.grant) return *attempt.grant;
      free_slot((*session)->id, call.key.str());
      if (!attempt.restart) return attempt.status;
    }
  }

  TryResult try_acquire(const GrantRequest& request, Clock::time_point deadline) override {
    AcquireCall call{request.key,     request.owner, request.ttl, request.metadata,
                     milliseconds(0), Clock::now(),  {},          options_.io_timeout};
    call.io_until = deadline;
    auto grant = acquire_queued(call);
    if (grant.ok()) return TryResult{Status::Ok(), *grant, milliseconds(0)};
    return TryResult{grant.status(), std::nullopt, milliseconds(0)};
  }

  // Per session: first the deletes that failed earlier on it (settle(): no keep-alive while one
  // is pending), then one keep-alive, then the own-key checks (etcd_own_keys.h): a lease whose
  // key is gone or was re-created is rejected, the others are renewed.
  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point deadline) override {
    std::vector<RenewOutcome> out(items.size());
    std::map<std::shared_ptr<Session>, HeldKeys> by_session;
    {
      MutexLock lock(mu_);
      for (std::size_t i = 0; i < items.size(); ++i) {
        auto it = held_.find(items[i].owner->hex());
        if (it == held_.end()) {
          out[i].kind = RenewOutcome::kRejected;  // released or never granted here
        } else {
          HeldKeys& held = by_session[it->second.session];
          held.items.push_back(i);
          held.keys.push_back(OwnKey{it->second.key, it->second.revision});
        }
      }
    }
    for (const auto& [session, held] : by_session) {
      const Clock::time_point sent = Clock::now();
      const RenewOutcome::Kind kind = send_keep_alive(session, sent, deadline);
      for (std::size_t i : held.items) out[i].kind = kind;
      if (kind != RenewOutcome::kRenewed) continue;
      check_own_keys(held, out, deadline);
      for (std::size_t i : held.items) {
        if (out[i].kind == RenewOutcome::kRenewed) {
          out[i].valid_until = validity_deadline(sent, items[i].ttl, options_.drift_factor);
        }
      }
    }
    // After every session's keep-alive and checks: the sweeps take none of their time.
    for (const auto& [session, held] : by_session) {
      if (!session->dead) sweep_ghosts(session);
    }
    return out;
  }

  Status release(const LockKey& key, const OwnerId& owner, Clock::time_point deadline) override {
    Held held;
    {
      MutexLock lock(mu_);
      auto it = held_.find(owner.hex());
      if (it == held_.end()) return Status::Ok();
      held = it->second;
    }
    (void)key;  // held.name is the key in the namespace
    Status status = drop_own_key(held, deadline);
    forget(owner);
    free_slot(held.session->id, held.name);
    if (status.ok()) return status;
    return Status(status.code(),
                  status.message() +
                      " (the key stays tracked: it is deleted before its session's next "
                      "keep-alive, or expires with the session within its TTL)");
  }

  Result<std::optional<HolderRow>> inspect(const LockKey& outer,
                                           Clock::time_point deadline) override {
    auto key = in_namespace(outer);
    if (!key.ok()) return key.status();
    std::int64_t revision = 0;
    auto first = first_key(key->str(), /*descending=*/false, 0, 0, &revision, deadline);
    if (!first.ok()) return first.status();
    if (!first->has_value()) return std::optional<HolderRow>();
    std::map<std::int64_t, milliseconds> ttls;
    return std::optional<HolderRow>(holder_info(key->str(), **first, ttls, deadline));
  }

  // One Range of every key under the prefix, within the list's deadline (or the op deadline,
  // whichever comes first); gRPC's 4 MiB limit on a received message bounds its memory.
  Result<std::vector<HolderRow>> list(std::string_view shown_prefix,
                                      const ListBounds& bounds) override {
    const std::string prefix = ns_ + std::string(shown_prefix);
    pb::RangeRequest request;
    request.set_key(prefix.empty() ? std::string(1, '\0') : std::string(prefix));
    request.set_range_end(prefix_end(std::string(prefix)));
    pb::RangeResponse response;
    const auto deadline = std::min(bounds.deadline, op_deadline());
    grpc::Status status = conn_->call(deadline, [&](Stubs& s, grpc::ClientContext& c) {
      return s.kv->Range(&c, request, &response);
    });
    if (!status.ok()) return to_status(status, "list");
    std::map<std::string, const pb::KeyValue*> holders;  // by lock name: lowest create revision
    for (const auto& kv : response.kvs()) {
      auto name = lock_name_of(kv.key());
      if (!name || !name->starts_with(prefix)) continue;
      auto [it, inserted] = holders.emplace(std::string(*name), &kv);
      if (!inserted && kv.create_revision() < it->second->create_revision()) it->second = &kv;
      if (holders.size() > bounds.max_locks) return too_many_locks(bounds.max_locks, shown_prefix);
    }
    std::vector<HolderRow> out;
    out.reserve(holders.size());
    std::map<std::int64_t, milliseconds> ttls;
    for (const auto& [name, kv] : holders) {
      out.push_back(holder_info(name, *kv, ttls, bounds.deadline));
    }
    return out;
  }

  std::string describe() const override { return description_; }
  std::uint64_t reconnects() const override { return conn_->reconnects(); }
  std::string issuer_identity() const override { return issuer_identity_; }
  // A lock's tokens are the create revisions of its keys, which lie under the namespace.
  std::string issuer_name(const LockKey& key) const override { return ns_ + key.str(); }

  ElectionBackend* elections() override { return this; }

  // if create_revision(own key) == token then Put(key, value) else read the lock's holder.
  Status guarded_put(const std::string& own, FencingToken token, std::string_view key,
                     std::string_view value, Clock::time_point deadline) override {
    auto name = lock_name_of(own);
    if (!name) return Status(Code::kInvalidArgument, "not a lock key of this backend: " + own);
    // Keys under NAME/ are the lock's line: a data key there would be taken for a holder or a
    // waiter that no session owns, and would block the lock until someone deletes it.
    if (key.starts_with(lock_prefix(*name))) {
      return Status(Code::kInvalidArgument,
                    fmt::format("etcd_fenced_put: the data key '{}' lies under the lock's own "
                                "prefix '{}', where its holders' keys live; choose another name",
                                key.substr(0, 100), lock_prefix(*name).substr(0, 100)));
    }
    if (!ns_.empty() && key.starts_with(ns_)) {
      return Status(Code::kInvalidArgument,
                    fmt::format("etcd_fenced_put: the data key '{}' lies under the lock "
                                "namespace '{}' (the URI's namespace=), where locks and "
                                "elections live; choose a name outside it",
                                key.substr(0, 100), ns_.substr(0, 100)));
    }
    pb::TxnRequest request;
    compare_create_revision(request, own, static_cast<std::int64_t>(token.value()));
    pb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(std::string(key));
    put->set_value(std::string(value));
    *request.add_failure()->mutable_request_range() = first_page(std::string(*name), false);
    pb::TxnResponse response;
    grpc::Status status = conn_->call(deadline, [&](Stubs& s, grpc::ClientContext& c) {
      return s.kv->Txn(&c, request, &response);
    });
    if (!status.ok()) return to_status(status, "fenced put");
    if (response.succeeded()) return Status::Ok();
    const auto& page = response.responses(0).response_range();
    const pb::KeyValue* holder = first_of_lock(page, *name);
    std::uint64_t current = 0;
    if (holder != nullptr) {
      current = static_cast<std::uint64_t>(holder->create_revision());
    } else if (page.more()) {  // the first page held only other locks' keys: look further
      std::int64_t ignored = 0;
      auto first = first_key(std::string(*name), false, 0, 0, &ignored, deadline);
      if (first.ok() && first->has_value())
        current = static_cast<std::uint64_t>((*first)->create_revision());
    }
    if (current > token.value()) return stale_token(token, FencingToken(current));
    return Status(Code::kFenced,
                  fmt::format("rejected: stale token {} (its lock key is gone; {})", token.value(),
                              current == 0 ? "nobody holds the lock"
                                           : fmt::format("the holder's token is {}", current)));
  }

  Status proclaim(const LockKey& outer, const OwnerId& owner, std::string_view value,
                  Clock::time_point deadline) override {
    auto name = in_namespace(outer);
    if (!name.ok()) return name.status();
    Held held;
    {
      MutexLock lock(mu_);
      auto it = held_.find(owner.hex());
      if (it == held_.end() || it->second.name != name->str())
        return Status(Code::kLocked, "not the leader any more (resigned)");
      held = it->second;
    }
    pb::TxnRequest request;
    compare_create_revision(request, held.key, held.revision);
    pb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(held.key);
    put->set_value(std::string(value));
    put->set_lease(held.session->id);
    pb::TxnResponse response;
    grpc::Status status = conn_->call(deadline, [&](Stubs& s, grpc::ClientContext& c) {
      return s.kv->Txn(&c, request, &response);
    });
    if (!status.ok()) return to_status(status, "proclaim");
    if (!response.succeeded()) {
      return Status(Code::kLocked, "not the leader any more (the leader key is gone)");
    }
    return Status::Ok();
  }

  Result<std::optional<LeaderInfo>> leader(const LockKey& outer,
                                           Clock::time_point deadline) override {
    auto name = in_namespace(outer);
    if (!name.ok()) return name.status();
    std::int64_t revision = 0;
    auto first = first_key(name->str(), /*descending=*/false, 0, 0, &revision, deadline);
    if (!first.ok()) return first.status();
    return leader_of(*first);
  }

  Status observe(const LockKey& outer,
                 const std::function<void(const std::optional<LeaderInfo>&)>& on_change,
                 std::stop_token stop) override {
    auto in_ns = in_namespace(outer);
    if (!in_ns.ok()) return in_ns.status();
    const LockKey& name = *in_ns;
    std::optional<LeaderInfo> last;
    bool reported = false;
    while (!stop.stop_requested()) {
      // Read the leader at revision R, then watch the election's keys from R + 1: no change can
      // fall between the read and the watch.
      std::int64_t revision = 0;
      auto first = first_key(name.str(), /*descending=*/false, 0, 0, &revision,
                             Clock::time_point::max());  // each read: the op budget
      if (!first.ok()) {
        if (stop.stop_requested()) break;
        return first.status();
      }
      std::optional<LeaderInfo> now = leader_of(*first);
      if (!reported || !same_leader(now, last)) {
        on_change(now);
        last = std::move(now);
        reported = true;
      }
      pb::WatchCreateRequest create;
      create.set_key(lock_prefix(name.str()));
      create.set_range_end(prefix_end(lock_prefix(name.str())));
      create.set_start_revision(revision + 1);
      auto mine = [&](const pb::WatchResponse& response) {
        for (const auto& event : response.events()) {
          if (lock_name_of(event.kv().key()) == name.str()) return true;
        }
        return false;
      };
      // Bounded watches: a stream on a member that silently left the cluster ends in time.
      auto result = conn_->watch(create, Clock::now() + kObserveChunk, stop, mine);
      if (result == EtcdConnection::WatchResult::kFailed) {
        Mutex mu;
        std::condition_variable_any cv;
        MutexLock lock(mu);
        cv.wait_for(lock, stop, milliseconds(50), [] { return false; });
      }
    }
    return Status::Ok();
  }

 private:
  // The lock (or election) `key` as it is named in etcd: the namespace (URI option namespace=,
  // default empty) and the key. kInvalidArgument when both together are over LockKey::kMaxBytes.
  Result<LockKey> in_namespace(const LockKey& key) const {
    if (ns_.empty()) return key;
    auto full = LockKey::make(ns_ + key.str());
    if (!full.ok()) {
      return Status(Code::kInvalidArgument,
                    fmt::format("the lock name with the namespace '{}' is over {} bytes", ns_,
                                LockKey::kMaxBytes));
    }
    return full;
  }
  // An etcd key or lock name as users see it: without the namespace.
  std::string shown(std::string_view name) const {
    if (!ns_.empty() && name.starts_with(ns_)) name.remove_prefix(ns_.size());
    return std::string(name);
  }

  static constexpr milliseconds kObserveChunk{10'000};

  std::optional<LeaderInfo> leader_of(const std::optional<pb::KeyValue>& kv) const {
    if (!kv) return std::nullopt;
    return LeaderInfo{shown(kv->key()), kv->value(),
                      FencingToken(static_cast<std::uint64_t>(kv->create_revision()))};
  }

  static bool same_leader(const std::optional<LeaderInfo>& a, const std::optional<LeaderInfo>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->key == b->key && a->value == b->value && a->token == b->token);
  }

  // One call's deadline: the op budget (failing over across every member), or `cap` if sooner.
  Clock::time_point op_deadline(Clock::time_point cap = Clock::time_point::max()) const {
    return std::min(Clock::now() + op_budget_, cap);
  }

  // The session for `ttl` (rounded up to whole seconds), granting a lease when there is none or
  // the last one may have expired (its validity, by our clock, has passed).
  // The lease grant of a new session ends by op_deadline(cap).
  Result<std::shared_ptr<Session>> session_for(milliseconds ttl,
                                               Clock::time_point cap = Clock::time_point::max()) {
    const auto seconds = std::chrono::ceil<std::chrono::seconds>(ttl);
    if (seconds > kMaxLeaseTtl) {
      return Status(
          Code::kInvalidArgument,
          fmt::format("TTL {}s is above etcd's maximum lease TTL of {}s (about 285 years)",
                      seconds.count(), kMaxLeaseTtl.count()));
    }
    MutexLock lock(sessions_mu_);
    auto& slot = sessions_[seconds.count()];
    if (slot && !slot->dead &&
        validity_deadline(slot->confirmed(), slot->ttl, options_.drift_factor) > Clock::now()) {
      return slot;
    }
    if (slot) {
      revoke(*slot);  // frees the keys of grants already declared lost, and undeleted ones
      MutexLock held_lock(mu_);
      drop_undeleted_locked(slot->id);
    }
    slot.reset();
    pb::LeaseGrantRequest request;
    request.set_ttl(seconds.count());
    pb::LeaseGrantResponse response;
    const Clock::time_point sent = Clock::now();
    grpc::Status status = conn_->call(op_deadline(cap), [&](Stubs& s, grpc::ClientContext& c) {
      return s.lease->LeaseGrant(&c, request, &response);
    });
    if (!status.ok() || !response.error().empty() || response.id() == 0) {
      sessions_.erase(seconds.count());  // `slot` is empty: no session for this TTL
      if (!status.ok()) return to_status(status, "lease grant");
      return Status(Code::kInternal, "etcd lease grant failed: " + response.error());
    }
    auto session = std::make_shared<Session>();
    session->id = response.id();
    session->ttl = std::chrono::duration_cast<milliseconds>(std::chrono::seconds(response.ttl()));
    session->confirm(sent);
    slot = session;
    return session;
  }

  // etcd's own limit (lease.MaxLeaseTTL): a larger TTL is refused by the server.
  static constexpr std::chrono::seconds kMaxLeaseTtl{9'000'000'000};

  void revoke(Session& session) {
    session.dead = true;
    pb::LeaseRevokeRequest request;
    request.set_id(session.id);
    pb::LeaseRevokeResponse response;
    (void)conn_->call(Clock::now() + options_.io_timeout, [&](Stubs& s, grpc::ClientContext& c) {
      return s.lease->LeaseRevoke(&c, request, &response);
    });
  }

  // Two acquisitions of one key on one session would share the own key: the second waits here
  // until the first is released (kLocked for a try, or when the wait runs out).
  // A slot taken by an own key whose delete failed (undeleted_) is settled first.
  Status take_slot(const std::shared_ptr<Session>& session, const AcquireCall& call) {
    const auto slot = std::make_pair(session->id, call.key.str());
    bool undeleted = false;
    {
      MutexLock lock(mu_);
      undeleted = undeleted_.contains(slot);
    }
    if (undeleted) (void)settle(session, Clock::now() + options_.io_timeout);
    MutexLock lock(mu_);
    auto free = [&]() FENCELOCK_REQUIRES(mu_) { return !slots_.contains(slot); };
    if (!free()) {
      if (call.wait <= milliseconds(0) && undeleted_.contains(slot)) {
        return Status(Code::kUnavailable,
                      "the own key of an earlier release that got no answer is not deleted yet");
      }
      if (call.wait <= milliseconds(0))
        return Status(Code::kLocked, "key is held by another owner");
      if (!slot_cv_.wait_until(lock, call.stop, call.deadline, free)) {
        if (call.stop.stop_requested()) return Status(Code::kCancelled, "acquisition cancelled");
        return Status(Code::kLocked, "key is still held after waiting");
      }
    }
    slots_.insert(slot);
    if (auto ghost = ghosts_.find(slot); ghost != ghosts_.end()) ++ghost->second.takes;
    return Status::Ok();
  }

  // Frees the slot, unless an own key whose delete failed still holds it (settle() frees it).
  void free_slot(std::int64_t lease, const std::string& name) {
    MutexLock lock(mu_);
    const auto slot = std::make_pair(lease, name);
    if (undeleted_.contains(slot)) return;
    slots_.erase(slot);
    slot_cv_.notify_all();
  }

  void forget(const OwnerId& owner) {
    MutexLock lock(mu_);
    held_.erase(owner.hex());
  }

  // Compare create revision and delete: never removes a later grant's key. An own key of
  // unknown revision is read first and compare-deleted with the revision found (none: done).
  Status delete_own_key(const Held& held, Clock::time_point deadline) {
    if (held.revision == 0) return Status::Ok();
    std::int64_t revision = held.revision;
    if (revision == kUnknownRevision) {
      pb::RangeRequest own;
      own.set_key(held.key);
      pb::RangeResponse mine;
      grpc::Status read = conn_->call(
          deadline, [&](Stubs& s, grpc::ClientContext& c) { return s.kv->Range(&c, own, &mine); });
      if (!read.ok()) return to_status(read, "release");
      if (mine.kvs_size() == 0) return Status::Ok();  // the ambiguous create was not applied
      revision = mine.kvs(0).create_revision();
    }
    pb::TxnRequest request;
    compare_create_revision(request, held.key, revision);
    request.add_success()->mutable_request_delete_range()->set_key(held.key);
    pb::TxnResponse response;
    grpc::Status status = conn_->call(deadline, [&](Stubs& s, grpc::ClientContext& c) {
      return s.kv->Txn(&c, request, &response);
    });
    return to_status(status, "release");
  }

  // delete_own_key(), and on failure (no answer: the key may well still be there, kept alive by
  // its session) the key is tracked in undeleted_ until settle() deletes it. Its slot stays
  // taken meanwhile (free_slot() leaves it).
  Status drop_own_key(const Held& held, Clock::time_point deadline) {
    Status status = delete_own_key(held, deadline);
    if (!status.ok()) {
      MutexLock lock(mu_);
      undeleted_[std::make_pair(held.session->id, held.name)] = held;
    }
    return status;
  }

  // Retries the deletes that failed on `session` (undeleted_). True when none is left. The keys of
  // a session that etcd reported gone (or that we revoked) went with its lease. One settle() per
  // session at a time (settling_): a second one returns false (still pending), since one that
  // copied an entry before another settled it would read the key of a later grant on that slot
  // and delete it (models/etcd.pml, variant CONCURRENT_SETTLE).
  bool settle(const std::shared_ptr<Session>& session, Clock::time_point deadline) {
    std::vector<Held> pending;
    {
      MutexLock lock(mu_);
      for (const auto& [slot, held] : undeleted_) {
        if (held.session == session) pending.push_back(held);
      }
      if (pending.empty()) return true;
      if (session->dead) {
        drop_undeleted_locked(session->id);
        return true;
      }
      if (settling_.contains(session->id)) return false;
      settling_.insert(session->id);
    }
    bool settled = true;
    for (const Held& held : pending) {
      if (!delete_own_key(held, deadline).ok()) {
        settled = false;
        break;
      }
      MutexLock lock(mu_);
      const auto slot = std::make_pair(held.session->id, held.name);
      if (undeleted_.erase(slot) == 0) continue;  // dropped with its session meanwhile
      slots_.erase(slot);
      slot_cv_.notify_all();
    }
    MutexLock lock(mu_);
    settling_.erase(session->id);
    return settled;
  }

  // Forgets the undeleted keys and the ghosts of lease `lease` (gone or revoked: they went with
  // it, and no create with it can be applied any more).
  void drop_undeleted_locked(std::int64_t lease) FENCELOCK_REQUIRES(mu_) {
    std::erase_if(ghosts_, [&](const auto& entry) { return entry.first.first == lease; });
    for (auto it = undeleted_.begin(); it != undeleted_.end();) {
      if (it->first.first != lease) {
        ++it;
        continue;
      }
      slots_.erase(it->first);
      it = undeleted_.erase(it);
    }
    slot_cv_.notify_all();
  }

  // How long a create without an answer is looked for: the lock's TTL, at least a minute (as
  // Redis tombstones live). One that reaches etcd later still can leave a key behind.
  static constexpr milliseconds kGhostWatch{60'000};

  void remember_ghost(const Held& held) {
    MutexLock lock(mu_);
    Ghosts& ghosts = ghosts_[std::make_pair(held.session->id, held.name)];
    if (!ghosts.session) {
      ghosts.session = held.session;
      ghosts.key = held.key;
    }
    const Clock::time_point until = Clock::now() + std::max(held.session->ttl, kGhostWatch);
    for (auto& [value, watched_until] : ghosts.values) {
      if (value == held.value) {
        watched_until = std::max(watched_until, until);
        return;
      }
    }
    ghosts.values.emplace_back(held.value, until);
  }

  // Deletes the own keys that creates without an answer wrote after their acquisition ended
  // (ghosts_): per kMaxCompares slots, one Txn of reads and, for the keys found, one Txn of
  // compare-create-revision deletes (nested Txns, one per key). A key is deleted only if no
  // acquisition of ours took its slot from before the read until after it (the slot was free and
  // its take count unchanged): then no grant of ours owns that key, so a late create wrote it. A
  // delete that reaches etcd late cannot remove a later grant's key, which has another create
  // revision. One sweep per session at a time; each call has io_timeout of its own, after the
  // keep-alive (the sweep takes none of the renewal's time).
  void sweep_ghosts(const std::shared_ptr<Session>& session) {
    struct Look {
      std::pair<std::int64_t, std::string> slot;
      std::string key;
      std::vector<std::string> values;
      std::uint64_t takes;
    };
    std::vector<Look> looks;
    {
      MutexLock lock(mu_);
      if (sweeping_.contains(session->id)) return;
      const Clock::time_point now = Clock::now();
      for (auto it = ghosts_.begin(); it != ghosts_.end();) {
        Ghosts& ghosts = it->second;
        std::erase_if(ghosts.values, [&](const auto& v) { return v.second <= now; });
        if (ghosts.values.empty()) {
          it = ghosts_.erase(it);
          continue;
        }
        if (ghosts.session == session && !slots_.contains(it->first)) {
          Look look{it->first, ghosts.key, {}, ghosts.takes};
          for (const auto& v : ghosts.values) look.values.push_back(v.first);
          looks.push_back(std::move(look));
        }
        ++it;
      }
      if (looks.empty()) return;
      sweeping_.insert(session->id);
    }
    struct Done {
      EtcdBackend* backend;
      std::int64_t id;
      ~Done() {
        MutexLock lock(backend->mu_);
        backend->sweeping_.erase(id);
      }
    } done{this, session->id};
    for (std::size_t from = 0; from < looks.size(); from += kMaxCompares) {
      const std::size_t to = std::min(looks.size(), from + kMaxCompares);
      pb::TxnRequest reads;
      for (std::size_t i = from; i < to; ++i) {
        reads.add_success()->mutable_request_range()->set_key(looks[i].key);
      }
      pb::TxnResponse found;
      grpc::Status status = conn_->call(
          Clock::now() + options_.io_timeout,
          [&](Stubs& s, grpc::ClientContext& c) { return s.kv->Txn(&c, reads, &found); });
      if (!status.ok() || found.responses_size() != static_cast<int>(to - from)) return;
      pb::TxnRequest erase;
      std::vector<std::pair<std::string, std::int64_t>> erased;  // key, create revision
      for (std::size_t i = from; i < to; ++i) {
        const auto& range = found.responses(static_cast<int>(i - from)).response_range();
        if (range.kvs_size() == 0) continue;
        const pb::KeyValue& kv = range.kvs(0);
        const Look& look = looks[i];
        if (kv.lease() != session->id ||
            std::find(look.values.begin(), look.values.end(), kv.value()) == look.values.end())
          continue;
        {
          MutexLock lock(mu_);
          auto it = ghosts_.find(look.slot);
          if (slots_.contains(look.slot) || it == ghosts_.end() || it->second.takes != look.takes)
            continue;
        }
        pb::TxnRequest* one = erase.add_success()->mutable_request_txn();
        compare_create_revision(*one, look.key, kv.create_revision());
        one->add_success()->mutable_request_delete_range()->set_key(look.key);
        erased.emplace_back(look.key, kv.create_revision());
      }
      if (erased.empty()) continue;
      pb::TxnResponse answer;
      status = conn_->call(
          Clock::now() + options_.io_timeout,
          [&](Stubs& s, grpc::ClientContext& c) { return s.kv->Txn(&c, erase, &answer); });
      if (!status.ok()) return;
      for (std::size_t k = 0;
           k < erased.size() && k < static_cast<std::size_t>(answer.responses_size()); ++k) {
        if (!answer.responses(static_cast<int>(k)).response_txn().succeeded()) continue;
        detail::log(LogLevel::kInfo,
                    "etcd: deleted {} (token {}): a create of an acquisition that had ended "
                    "reached etcd after it",
                    erased[k].first, erased[k].second);
      }
    }
  }

  // One keep-alive of `session` sent at `sent`, after settle(): kRenewed (etcd answered a TTL),
  // kRejected (the lease is gone) or kUnknown (no answer, or a failed delete is still pending: a
  // keep-alive would keep that key alive too).
  RenewOutcome::Kind send_keep_alive(const std::shared_ptr<Session>& session,
                                     Clock::time_point sent,
                                     Clock::time_point cap = Clock::time_point::max()) {
    const Clock::time_point until = std::min(sent + options_.io_timeout, cap);
    if (!session->dead && !settle(session, until)) return RenewOutcome::kUnknown;
    std::int64_t ttl = 0;
    grpc::Status status = session->dead ? grpc::Status(grpc::StatusCode::NOT_FOUND, "lease gone")
                                        : conn_->keep_alive(session->id, until, &ttl);
    if (status.ok() && ttl > 0) {
      session->confirm(sent);
      return RenewOutcome::kRenewed;
    }
    if ((status.ok() && ttl <= 0) || lease_not_found(status)) {
      session->dead = true;
      return RenewOutcome::kRejected;
    }
    return RenewOutcome::kUnknown;
  }

  // Confirms that every key of `held` still exists with its revision: the outcome of its item
  // becomes kRejected for a key that is gone or re-created, and kUnknown for keys whose check got
  // no answer (the checks after one without an answer are not sent: the round is retried soon).
  void check_own_keys(const HeldKeys& held, std::vector<RenewOutcome>& out, Clock::time_point cap) {
    const std::vector<pb::TxnRequest> checks = own_key_checks(held.keys);
    bool answered = true;
    for (std::size_t c = 0; c < checks.size(); ++c) {
      pb::TxnResponse response;
      if (answered) {
        answered = conn_
                       ->call(std::min(Clock::now() + options_.io_timeout, cap),
                              [&](Stubs& s, grpc::ClientContext& context) {
                                return s.kv->Txn(&context, checks[c], &response);
                              })
                       .ok();
      }
      const std::vector<bool> still =
          answered ? still_held(checks[c], response)
                   : std::vector<bool>(static_cast<std::size_t>(checks[c].compare_size()));
      for (std::size_t k = 0; k < still.size(); ++k) {
        RenewOutcome& outcome = out[held.items[c * kMaxCompares + k]];
        if (!answered) {
          outcome.kind = RenewOutcome::kUnknown;
        } else if (!still[k]) {
          outcome.kind = RenewOutcome::kRejected;
        }
      }
    }
  }

  static pb::RangeRequest first_page(const std::string& name, bool descending) {
    pb::RangeRequest range;
    range.set_key(lock_prefix(name));
    range.set_range_end(prefix_end(lock_prefix(name)));
    range.set_sort_target(pb::RangeRequest::CREATE);
    range.set_sort_order(descending ? pb::RangeRequest::DESCEND : pb::RangeRequest::ASCEND);
    range.set_limit(kPage);
    return range;
  }

  // The first key of lock `name` in create-revision order (ascending; or descending, below
  // `max_create`), read at `revision` (0: now; the revision read is stored in *read_revision).
  // Each request ends by op_deadline(cap).
  Result<std::optional<pb::KeyValue>> first_key(const std::string& name, bool descending,
                                                std::int64_t max_create, std::int64_t revision,
                                                std::int64_t* read_revision,
                                                Clock::time_point cap) {
    pb::RangeRequest request = first_page(name, descending);
    if (max_create > 0) request.set_max_create_revision(max_create);
    request.set_revision(revision);
    for (;;) {
      pb::RangeResponse page;
      grpc::Status status = conn_->call(op_deadline(cap), [&](Stubs& s, grpc::ClientContext& c) {
        return s.kv->Range(&c, request, &page);
      });
      if (!status.ok()) return to_status(status, "range");
      if (request.revision() == 0) {
        request.set_revision(page.header().revision());  // later pages: the same snapshot
        *read_revision = page.header().revision();
      }
      if (const pb::KeyValue* kv = first_of_lock(page, name))
        return std::optional<pb::KeyValue>(*kv);
      if (!page.more() || page.kvs().empty()) return std::optional<pb::KeyValue>();
      std::int64_t last = page.kvs(page.kvs_size() - 1).create_revision();
      // etcd cuts the sorted range at the limit, so keys that share the page's last create
      // revision (one Txn that created several keys under NAME/) can lie past the cut: the next
      // page starts at that revision again (the keys seen twice failed the filter already).
      // Only a page that is all one revision would come back the same: then all of that
      // revision is read at once and the next page starts past it. (Before, the next page
      // started past the last revision, and such a key of the lock was skipped.)
      std::int64_t next = last;
      if (page.kvs(0).create_revision() == last) {
        pb::RangeRequest tie = request;
        tie.set_limit(0);
        tie.set_min_create_revision(last);
        tie.set_max_create_revision(last);
        pb::RangeResponse tied;
        status = conn_->call(op_deadline(cap), [&](Stubs& s, grpc::ClientContext& c) {
          return s.kv->Range(&c, tie, &tied);
        });
        if (!status.ok()) return to_status(status, "range");
        if (const pb::KeyValue* kv = first_of_lock(tied, name))
          return std::optional<pb::KeyValue>(*kv);
        next = descending ? last - 1 : last + 1;
      }
      if (descending) {
        request.set_max_create_revision(next);
      } else {
        request.set_min_create_revision(next);
      }
    }
  }

  // Creates the own key (fresh: a leftover of an earlier acquisition is deleted first, so that
  // every grant has a new create revision) and reads the holder in the same revision.
  // Fills held.revision and *holder_revision.
  grpc::Status create_own_key(const AcquireCall& call, Held& held, std::int64_t* holder_revision) {
    for (int attempt = 0;; ++attempt) {
      pb::TxnRequest request;
      compare_create_revision(request, held.key, 0);  // the own key does not exist
      pb::PutRequest* put = request.add_success()->mutable_request_put();
      put->set_key(held.key);
      held.value =
          call.campaign ? call.metadata : encode_value(call.owner.short_hex(), call.metadata);
      put->set_value(held.value);
      put->set_lease(held.session->id);
      *request.add_success()->mutable_request_range() = first_page(held.name, false);
      request.add_failure()->mutable_request_range()->set_key(held.key);
      pb::TxnResponse response;
      int tries = 0;
      grpc::Status status =
          conn_->call(op_deadline(call.io_until), [&](Stubs& s, grpc::ClientContext& c) {
            ++tries;
            return s.kv->Txn(&c, request, &response);
          });
      // A try before the last went unanswered (the call retries only then) and may still be
      // applied, after this acquisition ended, whatever the last try's answer.
      if (tries > 1) remember_ghost(held);
      if (!status.ok()) return status;
      if (!response.succeeded()) {
        const auto& found = response.responses(0).response_range();
        Held leftover = held;
        leftover.revision = found.kvs_size() > 0 ? found.kvs(0).create_revision() : 0;
        if (attempt > 0)
          return grpc::Status(grpc::StatusCode::INTERNAL, "own key keeps reappearing");
        Status erased = delete_own_key(leftover, op_deadline(call.io_until));
        if (!erased.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, erased.message());
        continue;
      }
      held.revision = response.header().revision();
      const auto& page = response.responses(1).response_range();
      if (const pb::KeyValue* kv = first_of_lock(page, held.name)) {
        *holder_revision = kv->create_revision();
        return grpc::Status::OK;
      }
      std::int64_t ignored = 0;
      auto first = first_key(held.name, false, 0, held.revision, &ignored, call.io_until);
      if (!first.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, first.status().message());
      // Our key is in that snapshot, so something is found; were nothing found, that is no
      // grant (0: never our revision).
      *holder_revision = first->has_value() ? (*first)->create_revision() : 0;
      return grpc::Status::OK;
    }
  }

  // After a wake-up: whether the own key still exists with its revision (etcd issue 11456: a
  // session that expired while waiting takes the own key with it), and the holder's revision.
  Result<bool> recheck(const Held& held, std::int64_t* holder_revision, Clock::time_point cap) {
    pb::RangeRequest own;
    own.set_key(held.key);
    pb::RangeResponse mine;
    grpc::Status status = conn_->call(op_deadline(cap), [&](Stubs& s, grpc::ClientContext& c) {
      return s.kv->Range(&c, own, &mine);
    });
    if (!status.ok()) return to_status(status, "range");
    if (mine.kvs_size() == 0 || mine.kvs(0).create_revision() != held.revision) return false;
    std::int64_t ignored = 0;
    auto first = first_key(held.name, false, 0, mine.header().revision(), &ignored, cap);
    if (!first.ok()) return first.status();
    *holder_revision = first->has_value() ? (*first)->create_revision() : 0;
    return true;
  }

  // Sends a keep-alive for `session` if its last one is ttl/3 old (send_keep_alive: none while
  // a failed delete on it is pending). False when the lease is gone.
  bool keep_session_alive(const std::shared_ptr<Session>& session, bool force) {
    if (!force && Clock::now() < session->confirmed() + session->ttl / 3) return true;
    (void)send_keep_alive(session, Clock::now());
    if (!force && !session->dead) sweep_ghosts(session);
    return !session->dead;
  }

  Attempt give_up(const OwnerId& owner, const Held& held, Status status) {
    (void)drop_own_key(held, Clock::now() + options_.io_timeout);
    forget(owner);
    return Attempt{std::move(status), std::nullopt, false};
  }

  // Starts the acquisition over (a fresh own key, at the end of the line; on a fresh session if
  // etcd said this one is gone). Never marks a session dead on a guess: session_for() revokes
  // dead sessions, and a live one may carry valid grants.
  Attempt restart(const OwnerId& owner, const Held& held) {
    (void)drop_own_key(held, Clock::now() + options_.io_timeout);
    forget(owner);
    return Attempt{Status(Code::kUnavailable, "etcd session lost"), std::nullopt, true};
  }

  Attempt acquire_on(const AcquireCall& call, const std::shared_ptr<Session>& session) {
    Held held{session, call.key.str(), own_key(call.key.str(), session->id), 0};
    std::int64_t holder = 0;
    grpc::Status created = create_own_key(call, held, &holder);
    if (!created.ok()) {
      if (lease_not_found(created)) {
        session->dead = true;  // etcd says so: the next try grants a fresh lease
        return restart(call.owner, held);
      }
      // Ambiguous: the Txn may have created the own key. Its revision is unknown, but this
      // acquisition holds the (session, lock) slot, so no other grant of ours can own that key.
      if (held.revision == 0 && may_have_applied(created)) {
        held.revision = kUnknownRevision;
        remember_ghost(held);
      }
      return give_up(call.owner, held, to_status(created, "acquire"));
    }
    {
      MutexLock lock(mu_);
      held_[call.owner.hex()] = held;
    }
    const bool waits = call.wait > milliseconds(0);
    for (bool found_held = false;; found_held = true) {
      if (holder == held.revision) {
        Attempt granted = grant(call, held);
        if (granted.grant) granted.grant->contended = found_held;
        return granted;
      }
      if (!waits)
        return give_up(call.owner, held, Status(Code::kLocked, "key is held by another owner"));
      if (call.stop.stop_requested())
        return give_up(call.owner, held, Status(Code::kCancelled, "acquisition cancelled"));
      if (Clock::now() >= call.deadline) {
        return give_up(call.owner, held, Status(Code::kLocked, "key is still held after waiting"));
      }
      std::int64_t revision = 0;
      auto predecessor =
          first_key(held.name, /*descending=*/true, held.revision - 1, 0, &revision, call.io_until);
      if (!predecessor.ok()) return give_up(call.owner, held, predecessor.status());
      if (predecessor->has_value()) {
        const Clock::time_point keep_alive_due = session->confirmed() + session->ttl / 3;
        auto waited = conn_->wait_for_delete((*predecessor)->key(), revision + 1,
                                             std::min(call.deadline, keep_alive_due), call.stop);
        if (waited == EtcdConnection::WatchResult::kCancelled) {
          return give_up(call.owner, held, Status(Code::kCancelled, "acquisition cancelled"));
        }
        if (waited == EtcdConnection::WatchResult::kFailed) {
          std::this_thread::sleep_for(
              std::min<Clock::duration>(milliseconds(50), call.deadline - Clock::now()));
        }
      }
      // No renewer covers a waiter: it keeps its own session alive.
      if (!keep_session_alive(session, false)) return restart(call.owner, held);
      auto still_mine = recheck(held, &holder, call.io_until);
      if (!still_mine.ok()) return give_up(call.owner, held, still_mine.status());
      if (!*still_mine) {
        (void)keep_session_alive(session,
                                 /*force=*/true);  // tells a lost session from a deleted key
        return restart(call.owner, held);
      }
    }
  }

  Attempt grant(const AcquireCall& call, const Held& held) {
    const Session& session = *held.session;
    Clock::time_point valid =
        validity_deadline(session.confirmed(), call.ttl, options_.drift_factor);
    if (valid - Clock::now() < call.ttl / 2) {
      if (!keep_session_alive(held.session, true)) return restart(call.owner, held);
      valid = validity_deadline(session.confirmed(), call.ttl, options_.drift_factor);
    }
    if (valid <= Clock::now()) {
      return give_up(call.owner, held,
                     Status(Code::kDeadlineExceeded,
                            "etcd did not confirm the session within the lease's validity"));
    }
    return Attempt{Status::Ok(),
                   Grant{FencingToken(static_cast<std::uint64_t>(held.revision)), valid, held.key},
                   false};
  }

  // The TTL lookup ends by op_deadline(cap) (past it: 0, unknown).
  HolderRow holder_info(const std::string& name, const pb::KeyValue& kv,
                        std::map<std::int64_t, milliseconds>& ttls, Clock::time_point cap) {
    DecodedValue value = decode_value(kv.value());
    HolderRow info{shown(name),
                   value.owner_prefix.empty() ? lease_hex(kv.lease()) : value.owner_prefix,
                   FencingToken(static_cast<std::uint64_t>(kv.create_revision())), milliseconds(0),
                   value.metadata};
    if (kv.lease() != 0) {
      auto [it, inserted] = ttls.emplace(kv.lease(), milliseconds(0));
      if (inserted) {
        pb::LeaseTimeToLiveRequest request;
        request.set_id(kv.lease());
        pb::LeaseTimeToLiveResponse response;
        grpc::Status status = conn_->call(op_deadline(cap), [&](Stubs& s, grpc::ClientContext& c) {
          return s.lease->LeaseTimeToLive(&c, request, &response);
        });
        if (status.ok() && response.ttl() > 0) it->second = std::chrono::seconds(response.ttl());
      }
      info.ttl_remaining = it->second;
    }
    return info;
  }

  std::unique_ptr<EtcdConnection> conn_;
  const ClientOptions options_;
  const std::string description_;
  const std::string ns_;  // prepended to every lock and election name (URI option namespace=)
  const std::string issuer_identity_;  // Backend::issuer_identity(): "etcd:cluster=<id hex>"
  const milliseconds op_budget_;       // one call, failing over across every member

  Mutex sessions_mu_;  // held while a session is granted: one lease per TTL, never two
  std::map<std::int64_t, std::shared_ptr<Session>> sessions_
      FENCELOCK_GUARDED_BY(sessions_mu_);  // by TTL in s

  Mutex mu_;
  std::condition_variable_any slot_cv_;
  std::set<std::pair<std::int64_t, std::string>> slots_
      FENCELOCK_GUARDED_BY(mu_);                                // (lease, lock) in use
  std::map<std::string, Held> held_ FENCELOCK_GUARDED_BY(mu_);  // by owner id hex
  // Own keys whose delete got no answer, by their (lease, lock) slot, which they keep taken. No
  // keep-alive goes out for their session until settle() deleted them, so each is gone within
  // its TTL of the failed delete even if it never succeeds.
  std::map<std::pair<std::int64_t, std::string>, Held> undeleted_ FENCELOCK_GUARDED_BY(mu_);
  std::set<std::int64_t> settling_ FENCELOCK_GUARDED_BY(mu_);  // leases a settle() runs for
  std::map<std::pair<std::int64_t, std::string>, Ghosts> ghosts_
      FENCELOCK_GUARDED_BY(mu_);                               // by (lease, lock) slot
  std::set<std::int64_t> sweeping_ FENCELOCK_GUARDED_BY(mu_);  // leases a sweep runs for
};

}  // namespace

std::unique_ptr<Backend> make_backend_on(std::unique_ptr<EtcdConnection> connection,
                                         std::string description, std::size_t members,
                                         std::string key_namespace, std::string issuer_identity) {
  return std::make_unique<EtcdBackend>(std::move(connection), std::move(description), members,
                                       std::move(key_namespace), std::move(issuer_identity));
}

}  // namespace etcd
}  // namespace fencelock::detail
