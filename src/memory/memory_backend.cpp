#include "memory/memory_backend.h"

#include <condition_variable>
#include <functional>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "core/mutex.h"
#include "core/quorum.h"

namespace fencelock::detail {
namespace {

// The lock table shared by every memory:// Client of one name.
struct Table {
  struct Entry {
    std::string owner;  // empty when free
    std::uint64_t counter = 0;
    std::uint64_t token = 0;
    Clock::time_point expires_at{};
    std::string metadata;
    std::uint64_t releases = 0;
    std::uint64_t attempts = 0;
    std::uint64_t watchers = 0;
    std::map<std::uint64_t, std::function<void()>> wakers;  // ReleaseWatch::set_waker, by id
  };

  bool held(const Entry& e, Clock::time_point now) const {
    return !e.owner.empty() && e.expires_at > now;
  }

  Mutex mu;
  std::condition_variable_any released;
  std::map<std::string, Entry> entries FENCELOCK_GUARDED_BY(mu);
  std::uint64_t next_waker FENCELOCK_GUARDED_BY(mu) = 1;
};

std::shared_ptr<Table> table_named(const std::string& name) {
  static Mutex mu;
  static std::map<std::string, std::weak_ptr<Table>> tables;
  MutexLock lock(mu);
  auto& weak = tables[name];
  auto table = weak.lock();
  if (!table) {
    table = std::make_shared<Table>();
    weak = table;
  }
  return table;
}

class MemoryWatch final : public ReleaseWatch {
 public:
  MemoryWatch(std::shared_ptr<Table> table, std::string key)
      : table_(std::move(table)), key_(std::move(key)) {
    MutexLock lock(table_->mu);
    auto& entry = table_->entries[key_];
    seen_ = entry.releases;
    entry.watchers++;
  }
  ~MemoryWatch() override {
    MutexLock lock(table_->mu);
    auto& entry = table_->entries[key_];
    entry.watchers--;
    if (waker_ != 0) entry.wakers.erase(waker_);
  }

  bool set_waker(std::function<void()> wake) override {
    MutexLock lock(table_->mu);
    waker_ = table_->next_waker++;
    table_->entries[key_].wakers.emplace(waker_, std::move(wake));
    return true;
  }

  bool wait_until(Clock::time_point until, std::stop_token stop) override {
    MutexLock lock(table_->mu);
    auto& entry = table_->entries[key_];
    bool woke =
        table_->released.wait_until(lock, stop, until, [&] { return entry.releases != seen_; });
    seen_ = entry.releases;
    return woke;
  }

 private:
  std::shared_ptr<Table> table_;
  std::string key_;
  std::uint64_t seen_ = 0;
  std::uint64_t waker_ = 0;
};

class MemoryBackend final : public Backend, public ReleaseEvents {
 public:
  MemoryBackend(std::string name, std::shared_ptr<Table> table)
      : name_(std::move(name)), table_(std::move(table)) {}

  ReleaseEvents* release_events() override { return this; }

  milliseconds min_ttl() const override { return milliseconds(10); }

  // memory:// does no I/O: every call returns at once, well within its deadline.
  TryResult try_acquire(const GrantRequest& request, Clock::time_point /*deadline*/) override {
    Clock::time_point sent = Clock::now();
    MutexLock lock(table_->mu);
    auto& e = table_->entries[request.key.str()];
    e.attempts++;
    if (table_->held(e, sent)) {
      auto left = std::chrono::ceil<milliseconds>(e.expires_at - sent);
      return TryResult{Status(Code::kLocked, "key is held by another owner"), std::nullopt, left};
    }
    e.owner = request.owner.hex();
    e.token = ++e.counter;
    e.expires_at = sent + request.ttl;
    e.metadata = request.metadata;
    Grant grant{FencingToken(e.token), validity_deadline(sent, request.ttl, kDrift)};
    return TryResult{Status::Ok(), grant, milliseconds(0)};
  }

  std::unique_ptr<ReleaseWatch> watch(const LockKey& key, const OwnerId&,
                                      Clock::time_point /*deadline*/) override {
    return std::make_unique<MemoryWatch>(table_, key.str());
  }

  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point /*deadline*/) override {
    Clock::time_point sent = Clock::now();
    MutexLock lock(table_->mu);
    std::vector<RenewOutcome> out;
    out.reserve(items.size());
    for (const auto& item : items) {
      auto it = table_->entries.find(item.key->str());
      if (it == table_->entries.end() || !table_->held(it->second, sent) ||
          it->second.owner != item.owner->hex()) {
        out.push_back({RenewOutcome::kRejected, {}});
        continue;
      }
      it->second.expires_at = sent + item.ttl;
      out.push_back({RenewOutcome::kRenewed, validity_deadline(sent, item.ttl, kDrift)});
    }
    return out;
  }

  Status release(const LockKey& key, const OwnerId& owner, Clock::time_point) override {
    MutexLock lock(table_->mu);
    auto it = table_->entries.find(key.str());
    if (it == table_->entries.end() || it->second.owner != owner.hex()) return Status::Ok();
    it->second.owner.clear();
    it->second.releases++;
    table_->released.notify_all();
    std::vector<std::function<void()>> wake;
    for (const auto& [id, waker] : it->second.wakers) wake.push_back(waker);
    lock.unlock();
    for (const auto& waker : wake) waker();
    return Status::Ok();
  }

  Result<std::optional<HolderRow>> inspect(const LockKey& key,
                                           Clock::time_point /*deadline*/) override {
    Clock::time_point now = Clock::now();
    MutexLock lock(table_->mu);
    auto it = table_->entries.find(key.str());
    if (it == table_->entries.end() || !table_->held(it->second, now)) {
      return std::optional<HolderRow>();
    }
    return std::optional<HolderRow>(info(it->first, it->second, now));
  }

  Result<std::vector<HolderRow>> list(std::string_view prefix, const ListBounds& bounds) override {
    Clock::time_point now = Clock::now();
    MutexLock lock(table_->mu);
    std::vector<HolderRow> out;
    for (auto it = table_->entries.lower_bound(std::string(prefix));
         it != table_->entries.end() && it->first.starts_with(prefix); ++it) {
      if (!table_->held(it->second, now)) continue;
      if (out.size() == bounds.max_locks) return too_many_locks(bounds.max_locks, prefix);
      out.push_back(info(it->first, it->second, now));
    }
    return out;
  }

  std::string describe() const override { return "memory://" + name_; }

 private:
  static constexpr double kDrift = 0.01;

  static HolderRow info(const std::string& key, const Table::Entry& e, Clock::time_point now) {
    return HolderRow{key, e.owner.substr(0, 8), FencingToken(e.token),
                     std::chrono::ceil<milliseconds>(e.expires_at - now), e.metadata};
  }

  std::string name_;
  std::shared_ptr<Table> table_;
};

}  // namespace

MemoryStats memory_stats(const std::string& name, const std::string& key) {
  auto table = table_named(name);
  MutexLock lock(table->mu);
  auto it = table->entries.find(key);
  if (it == table->entries.end()) return {};
  return MemoryStats{it->second.attempts, it->second.watchers};
}

Result<std::unique_ptr<Backend>> make_memory_backend(const ParsedUri& uri) {
  if (uri.endpoints.size() > 1 || !uri.path.empty()) {
    return Status(Code::kInvalidArgument, "memory:// takes at most a name, e.g. memory://tests");
  }
  std::string name = uri.endpoints.empty() ? "default" : uri.endpoints[0].host;
  return std::unique_ptr<Backend>(std::make_unique<MemoryBackend>(name, table_named(name)));
}

}  // namespace fencelock::detail
