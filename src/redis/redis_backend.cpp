#include "redis/redis_backend.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/log_internal.h"
#include "core/quorum.h"
#include "core/saturate.h"
#include "core/wait_loop.h"
#include "redis/connection.h"
#include "redis/redis_keys.h"
#include "redis/redis_options.h"
#include "redis/release_finisher.h"
#include "redis/script_replies.h"
#include "redis/subscriber.h"
#include "redis_scripts.h"

namespace fencelock::detail {
namespace redis {
namespace {

// Leases per renewal script call (renew_batch= in the URI; the calls of one round are pipelined).
// Each call runs atomically on the server, about 1-4 us per lease: the batch bounds how long one
// renewal call can stall other clients of the instance (docs/BENCHMARKS.md, "Renewal batches").
// The shortest life of a tombstone (release.lua), in ms.
constexpr long long kMinTombstoneLife = 60'000;

std::string evalsha(std::string_view sha, const std::vector<std::string>& keys,
                    const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"EVALSHA", std::string(sha), std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return format_command(argv);
}

// An error reply for one script call: a dropped script cache (NOSCRIPT) means the connection's
// SCRIPT LOAD is stale; drop pooled connections so the next one reloads.
Status script_error(InstanceCall& call, const redisReply* r) {
  std::string_view text = reply_text(r);
  if (text.substr(0, 8) == "NOSCRIPT") call.instance->note_failure();
  return status_from_error_reply(text, call.instance->address());
}

// A counter this far ahead of its server's clock is worth a warning (docs/PROTOCOLS.md, "Tokens
// after data loss"): the clocks disagree by more than the restart delay must cover, or one stepped
// back. Said at most once a minute per instance.
constexpr milliseconds kCounterAheadWarning{1000};
// The same warning about the same instance is repeated at most once a minute.
constexpr Clock::duration kWarningEvery = std::chrono::minutes(1);

// Per-instance outcome of round 1.
struct Round1 {
  std::vector<int> granted;             // instance indices
  std::vector<std::uint64_t> counters;  // their counters
  std::vector<long long> ahead_ms;      // how far each counter ran ahead of its server's clock
  std::vector<long long> held_pttl;     // PTTL of the holder, per instance that refused
  std::vector<std::size_t> refused;     // the instances (indices) that refused
  std::vector<Status> errors;           // per instance that did not answer properly
  // The instances (indices) that answered with an error reply, and what it said.
  std::vector<std::pair<std::size_t, std::string>> error_replies;
};

class RedlockBackend final : public Backend,
                             public ReleaseEvents,
                             public BatchedTries,
                             public BatchedReleases {
 public:
  RedlockBackend(const std::vector<ConnectSpec>& specs, ClientOptions options,
                 std::string description, std::size_t renew_batch)
      : options_(options),
        renew_batch_(renew_batch),
        description_(std::move(description)),
        hub_(specs, wake_channel(OwnerId::random().hex()), options.connect_timeout) {
    for (auto& spec : specs) instances_.push_back(std::make_unique<Instance>(spec));
    std::vector<Instance*> alive_on;
    for (auto& instance : instances_) alive_on.push_back(instance.get());
    hub_.attach(std::move(alive_on), options_.io_timeout,
                [this](int instance, const std::string& owner, const std::string& lock) {
                  leave_stray_place(instance, owner, lock);
                });
  }

  // The hub's threads use instances_ and finisher_: stopped before either goes.
  ~RedlockBackend() override { hub_.stop(); }

  std::vector<std::unique_ptr<Instance>>& instances() { return instances_; }

  std::uint64_t reconnects() const override {
    std::uint64_t total = 0;
    for (const auto& instance : instances_) total += instance->reconnects();
    return total;
  }

  ReleaseEvents* release_events() override { return this; }
  BatchedTries* batched_tries() override { return this; }
  BatchedReleases* batched_releases() override { return this; }

  milliseconds min_ttl() const override { return milliseconds(10); }

  TryResult try_acquire(const GrantRequest& req, Clock::time_point deadline) override {
    Attempt attempt = prepare_attempt(req, Clock::now(), deadline);
    auto calls = calls_to_all(&attempt.command);
    fan_out(calls, attempt.io_deadline, majority_then_grace(req.ttl));
    return conclude_attempt(req, attempt, calls);
  }

  bool batches_tries(milliseconds ttl) const override { return ttl >= kBatchMinTtl; }

  // Round 1 of every request in one pipeline per instance (one write for all of them); the
  // rest (round 2, a failed attempt's release) per request, as try_acquire does it.
  //
  // Only tries whose TTL is at least kBatchMinTtl go together, and only with tries of the same
  // acquisition cap: a batch shares one send time (validity counts from it) and one deadline,
  // which a short TTL cannot spare (a 20 ms lease would be gone before a long pipeline's last
  // reply) and must not impose on the others. The shorter ones go alone. The tries that reached
  // a majority are concluded first, so that a failed one's release never delays a grant.
  static constexpr milliseconds kBatchMinTtl{1000};
  std::vector<TryResult> try_acquire_many(std::span<const GrantRequest> requests,
                                          milliseconds budget) override {
    std::vector<std::optional<TryResult>> results(requests.size());
    std::map<milliseconds, std::vector<std::size_t>> batches;  // by acquisition cap
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].ttl < kBatchMinTtl) {
        results[i] = try_acquire(requests[i], deadline_after(Clock::now(), budget));
      } else {
        batches[acquire_io_cap(requests[i].ttl)].push_back(i);
      }
    }
    for (const auto& [cap, members] : batches) {
      if (members.size() == 1) {
        results[members[0]] =
            try_acquire(requests[members[0]], deadline_after(Clock::now(), budget));
        continue;
      }
      const Clock::time_point sent = Clock::now();
      std::vector<Attempt> attempts;
      attempts.reserve(members.size());
      Clock::time_point io_deadline = Clock::time_point::max();
      milliseconds shortest = milliseconds::max();
      for (std::size_t i : members) {
        attempts.push_back(prepare_attempt(requests[i], sent, deadline_after(sent, budget)));
        io_deadline = std::min(io_deadline, attempts.back().io_deadline);
        shortest = std::min(shortest, requests[i].ttl);
      }
      std::vector<InstanceCall> calls = calls_to_all(nullptr);
      for (auto& call : calls) {
        for (const Attempt& attempt : attempts) call.commands.push_back(&attempt.command);
      }
      fan_out(calls, io_deadline, majority_then_grace(shortest));
      std::vector<std::vector<InstanceCall>> own = split_pipelines(calls);
      std::vector<std::size_t> granted_first, others;
      for (std::size_t m = 0; m < members.size(); ++m) {
        int grants = 0;
        for (const InstanceCall& part : own[m]) {
          if (part.replies.empty()) continue;
          const auto answer = interpret_acquire_reply(*part.replies[0]);
          if (answer && answer->granted) grants++;
        }
        (has_quorum(grants, n()) ? granted_first : others).push_back(m);
      }
      for (const auto* order : {&granted_first, &others}) {
        for (std::size_t m : *order) {
          results[members[m]] = conclude_attempt(requests[members[m]], attempts[m], own[m]);
        }
      }
    }
    std::vector<TryResult> out;
    out.reserve(results.size());
    for (auto& result : results) out.push_back(std::move(*result));
    return out;
  }

  // Command m's part of each instance's pipeline (`calls`, the same commands to every
  // instance): its reply, or why there is none. Moves the replies out of `calls`.
  static std::vector<std::vector<InstanceCall>> split_pipelines(std::vector<InstanceCall>& calls) {
    const std::size_t commands = calls.empty() ? 0 : calls.front().commands.size();
    std::vector<std::vector<InstanceCall>> own(commands);
    for (std::size_t m = 0; m < commands; ++m) {
      own[m].resize(calls.size());
      for (std::size_t c = 0; c < calls.size(); ++c) {
        InstanceCall& part = own[m][c];
        part.instance = calls[c].instance;
        part.commands.push_back(calls[c].commands[m]);
        part.sent = calls[c].sent;
        if (m < calls[c].replies.size()) {
          part.replies.push_back(std::move(calls[c].replies[m]));
        } else {
          part.error =
              calls[c].error.ok()
                  ? Status(Code::kDeadlineExceeded,
                           fmt::format("{}: no reply in time", calls[c].instance->address()))
                  : calls[c].error;
        }
      }
    }
    return own;
  }

  // Every release in one pipeline per instance (one write for all of them), each concluded as
  // release_grant concludes its own.
  std::vector<Status> release_many(std::span<const ReleaseRequest> requests,
                                   milliseconds budget) override {
    std::vector<std::string> commands;
    commands.reserve(requests.size());
    for (const ReleaseRequest& r : requests) {
      commands.push_back(release_command(r.key.str(), r.owner, r.backend_key,
                                         /*leave_queue=*/true, tombstone_life(r.ttl)));
    }
    std::vector<InstanceCall> calls = calls_to_all(nullptr);
    for (auto& call : calls) {
      for (const std::string& command : commands) call.commands.push_back(&command);
    }
    if (!requests.empty()) {
      fan_out(calls, deadline_after(Clock::now(), budget), majority_then_grace(milliseconds(2000)));
    }
    std::vector<std::vector<InstanceCall>> own = split_pipelines(calls);
    std::vector<Status> out;
    out.reserve(requests.size());
    for (std::size_t m = 0; m < requests.size(); ++m) {
      const ReleaseRequest& r = requests[m];
      out.push_back(conclude_release(r.key.str(), r.backend_key, commands[m],
                                     /*leave_queue=*/true, tombstone_life(r.ttl), own[m],
                                     /*only=*/false));
    }
    return out;
  }

  // One attempt's round 1, ready to send.
  struct Attempt {
    Clock::time_point sent;
    Clock::time_point validity;
    Clock::time_point io_deadline;  // round 1's
    Clock::time_point deadline;     // the caller's: rounds 1 and 2 end by it
    std::string value;
    std::vector<std::string> owed;
    std::string command;
  };

  Attempt prepare_attempt(const GrantRequest& req, Clock::time_point sent,
                          Clock::time_point deadline) {
    const Clock::time_point validity = validity_deadline(sent, req.ttl, options_.drift_factor);
    // A slow or silent instance must not eat the lease: an acquisition waits at most ttl/10
    // (io_timeout if shorter) for any instance, and once a majority has answered the rest get
    // only a short grace. And never past the caller's deadline.
    const Clock::time_point io_deadline =
        std::min({sent + acquire_io_cap(req.ttl), validity, deadline});
    const std::string& k = req.key.str();
    const std::string owner = req.owner.hex();
    // A fresh lock value for every attempt (the Redlock rule): the owner id names the waiter,
    // the value names this attempt, so a late release of an earlier attempt cannot delete it.
    // The owner id comes first, so that inspect() still shows the owner's prefix.
    const std::string value = attempt_value(req.owner);
    std::vector<std::string> keys = {
        lock_key(k),         fence_key(k),      holder_key(k),          queue_key(k),
        queue_expiry_key(k), queue_wake_key(k), tombstone_key(k, value)};
    std::vector<std::string> args = {owner,
                                     std::to_string(req.ttl.count()),
                                     req.metadata,
                                     std::to_string(req.queue_for.count()),
                                     std::to_string(req.ticket),
                                     hub_.wake_channel(),
                                     value};
    // Releases of this lock still owed to some instance travel with this attempt (acquire.lua).
    const std::vector<std::string> owed = owed_releases_.of(k, sent);
    args.push_back(std::to_string(owed.size()));
    args.push_back(std::to_string(tombstone_life(req.ttl).count()));
    for (const std::string& released : owed) {
      keys.push_back(tombstone_key(k, released));
      args.push_back(released);
    }
    return Attempt{
        sent, validity, io_deadline, deadline, value, owed, evalsha(lua::acquire_sha1, keys, args)};
  }

  // What round 1's replies (`calls`, one command each) make of the attempt.
  TryResult conclude_attempt(const GrantRequest& req, const Attempt& attempt,
                             std::vector<InstanceCall>& calls) {
    const std::string& k = req.key.str();
    const std::string& value = attempt.value;
    const std::vector<std::string>& owed = attempt.owed;
    const Clock::time_point validity = attempt.validity;
    // Every instance that answered ran those releases: once all did, none is owed any more.
    if (!owed.empty() && std::all_of(calls.begin(), calls.end(), [](const InstanceCall& c) {
          return c.error.ok() && c.replies[0]->type != REDIS_REPLY_ERROR;
        })) {
      owed_releases_.settled(k, owed);
    }
    Round1 r1 = tally_round1(calls);
    warn_about_round1(req.key, r1);

    Status failure;
    if (has_quorum(static_cast<int>(r1.granted.size()), n())) {
      std::optional<FencingToken> token = select_token(r1.counters);
      Status confirmed = round2(req, value, *token, r1, std::min(validity, attempt.deadline));
      if (confirmed.ok() && Clock::now() < validity) {
        return TryResult{Status::Ok(), Grant{*token, validity, value}, milliseconds(0)};
      }
      failure = confirmed.ok() ? Status(Code::kDeadlineExceeded,
                                        "acquiring took longer than the lease's validity; "
                                        "use a longer TTL")
                               : confirmed;
    } else {
      failure = round1_failure(r1);
    }
    // Nothing may stay behind: release this attempt's value where it was granted and where the
    // outcome is unknown (no answer in time: the acquire may still run there, and the release's
    // tombstone makes it do nothing); keep the place in the wait queue (the caller leaves it if
    // it gives up). An instance that plainly said "held" took nothing, and one the command never
    // reached (its connection was being made) cannot run it late.
    std::vector<bool> release_on(calls.size(), false);
    for (std::size_t i = 0; i < calls.size(); ++i) release_on[i] = calls[i].sent;
    for (std::size_t i : r1.refused) release_on[i] = false;
    if (std::find(release_on.begin(), release_on.end(), true) != release_on.end()) {
      const Status released =
          release_keys(req.key, req.owner, value, Clock::now() + options_.io_timeout,
                       /*leave_queue=*/false, tombstone_life(req.ttl), release_on);
      failure = with_release_outcome(std::move(failure), r1, released);
    }
    milliseconds retry = failure.code() == Code::kLocked ? retry_after(r1) : milliseconds(0);
    return TryResult{failure, std::nullopt, retry};
  }

  std::unique_ptr<ReleaseWatch> watch(const LockKey&, const OwnerId& owner,
                                      Clock::time_point deadline) override {
    return hub_.watch(owner.hex(), deadline);
  }

  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point deadline) override {
    std::vector<RenewOutcome> out(items.size());
    if (items.empty()) return out;
    const Clock::time_point sent = Clock::now();
    std::vector<std::string> commands;
    for (std::size_t start = 0; start < items.size(); start += renew_batch_) {
      std::vector<std::string> keys, args;
      for (std::size_t i = start; i < std::min(items.size(), start + renew_batch_); ++i) {
        keys.push_back(lock_key(items[i].key->str()));
        keys.push_back(holder_key(items[i].key->str()));
        args.push_back(items[i].backend_key != nullptr ? *items[i].backend_key : std::string());
        args.push_back(std::to_string(items[i].ttl.count()));
      }
      commands.push_back(evalsha(lua::renew_sha1, keys, args));
    }
    milliseconds shortest = items[0].ttl;
    Clock::time_point renew_by = Clock::time_point::max();
    for (const auto& item : items) {
      shortest = std::min(shortest, item.ttl);
      renew_by = std::min(renew_by, item.renew_by);
    }
    std::vector<InstanceCall> calls = calls_to_all(nullptr);
    for (auto& call : calls) {
      for (const auto& c : commands) call.commands.push_back(&c);
    }
    // A round of many batches is a long pipeline. An instance that keeps answering may take
    // until the first lease of the round would be declared lost (io_timeout at least); one
    // that is silent for io_timeout fails (as a single call would); once a majority has
    // answered everything, the others have until io_timeout, or a twelfth of the shortest TTL
    // if that is sooner, after the start (a silent minority must not hold the round open past
    // the leases' validity). Replies that came before a failure count. A round starts a third
    // of the TTL after the last one; a twelfth more keeps more than half the TTL of validity
    // left when its outcome is applied, which is when `fencelock run` would stop its command
    // (a quarter did not: with one instance of three stopped, run stopped its command at a
    // 2 s TTL every time).
    fan_out(
        calls,
        std::min({std::max(renew_by, sent + options_.io_timeout),
                  sent + shortest - drift_allowance(shortest, options_.drift_factor), deadline}),
        PipelineLimits{.stall = options_.io_timeout,
                       .enough = static_cast<std::size_t>(quorum(n())),
                       .enough_by = sent + options_.io_timeout,
                       .grace = shortest / 12});
    std::vector<int> confirmed(items.size()), rejected(items.size());
    for (auto& call : calls) {
      for (std::size_t c = 0; c < call.replies.size(); ++c) {
        const redisReply* r = call.replies[c].get();
        if (r->type == REDIS_REPLY_ERROR) {
          (void)script_error(call, r);
          continue;
        }
        const std::size_t first = c * renew_batch_;
        if (first >= items.size()) continue;
        const auto votes = interpret_renew_reply(*r, std::min(renew_batch_, items.size() - first));
        for (std::size_t j = 0; j < votes.size(); ++j) {
          if (votes[j] == RenewVote::kConfirmed) confirmed[first + j]++;
          if (votes[j] == RenewVote::kRejected) rejected[first + j]++;
        }
      }
    }
    Clock::time_point now = Clock::now();
    for (std::size_t i = 0; i < items.size(); ++i) {
      Clock::time_point valid = validity_deadline(sent, items[i].ttl, options_.drift_factor);
      if (has_quorum(confirmed[i], n()) && now < valid) {
        out[i] = {RenewOutcome::kRenewed, valid};
      } else if (rejected[i] > n() - quorum(n())) {
        out[i] = {RenewOutcome::kRejected, {}};
      }
    }
    return out;
  }

  // An acquisition that gives up holds no grant: it only leaves the wait queue (each of its
  // attempts already released its own value).
  Status release(const LockKey& key, const OwnerId& owner, Clock::time_point deadline) override {
    return release_keys(key, owner, "", deadline, /*leave_queue=*/true, milliseconds(0));
  }

  // Where the grant's value is not found (an instance whose round 1 went unanswered, whose
  // acquire may still be on its way), the release leaves a tombstone.
  Status release_grant(const LockKey& key, const OwnerId& owner, const std::string& value,
                       milliseconds ttl, Clock::time_point deadline) override {
    return release_keys(key, owner, value, deadline, /*leave_queue=*/true, tombstone_life(ttl));
  }

  // How long a tombstone keeps a late acquire of the attempt from running (docs/PROTOCOLS.md,
  // "Late attempts"): the lock's TTL, and at least a minute. A connection the client gave up on is
  // closed with a reset, so its own kernel sends nothing more; what is already past it (in a
  // proxy, in the server's socket buffer) runs when it arrives.
  static milliseconds tombstone_life(milliseconds ttl) {
    return std::max(ttl, milliseconds(kMinTombstoneLife));
  }

  // `failure` of an attempt, with what its release did where round 1's outcome was unknown: said
  // only when that is so ("released"), or that the lock may stay held until its TTL.
  Status with_release_outcome(Status failure, const Round1& r1, const Status& released) const {
    if (r1.errors.empty() || failure.code() == Code::kLocked) return failure;
    const bool unknown = std::any_of(r1.errors.begin(), r1.errors.end(), [](const Status& e) {
      return e.code() == Code::kDeadlineExceeded;
    });
    if (!unknown) return failure;
    return Status(failure.code(),
                  released.ok()
                      ? failure.message() +
                            " (outcome unknown; this attempt was released, and it does nothing if "
                            "it still arrives)"
                      : failure.message() +
                            fmt::format(" (outcome unknown, and its release was not answered in "
                                        "time either: it is sent again in the background, but "
                                        "the lock may stay held until its TTL ends: {})",
                                        released.message()));
  }

  // Once a majority of the instances answered, the others get a short grace (ttl/20 within
  // [5 ms, 100 ms], or as long again as the majority took): a silent minority cannot hold a
  // round open.
  PipelineLimits majority_then_grace(milliseconds ttl) const {
    return PipelineLimits{.enough = static_cast<std::size_t>(quorum(n())),
                          .grace = std::clamp(ttl / 20, milliseconds(5), milliseconds(100))};
  }

  // How long an acquisition waits for any instance: ttl/10, at least 50 ms, at most io_timeout.
  milliseconds acquire_io_cap(milliseconds ttl) const {
    return std::min(options_.io_timeout, std::max(ttl / 10, milliseconds(50)));
  }

  // The lock value of one attempt: the owner id, then 64 random bits.
  static std::string attempt_value(const OwnerId& owner) {
    return owner.hex() + OwnerId::random().hex().substr(0, 16);
  }

  // A wake-up reached this Client for `owner`, who no longer waits here (its leave of the queue
  // did not arrive, or the place stayed on an instance that refused a granted attempt): the
  // place would hold the line for as long as this Client lives, so the leave goes again, to
  // that instance. Called on a subscriber thread: the finisher sends it.
  void leave_stray_place(int instance, const std::string& owner, const std::string& lock) {
    const std::string k = key_from_lock_key(lock);
    const auto parsed = OwnerId::from_hex(owner);
    if (k.empty() || !parsed.ok() || instance < 0 || instance >= n()) return;
    std::string cmd = release_command(k, *parsed, "", /*leave_queue=*/true, milliseconds(0));
    finisher_.finish(instances_[static_cast<std::size_t>(instance)].get(), k, "", std::move(cmd),
                     Clock::now() + kQueueHold, options_.io_timeout);
  }

  // The release script's call: releases `value` (none: '') and leaves the queue when
  // `leave_queue`; a tombstone for `tombstone` ms where the lock does not hold `value`.
  static std::string release_command(const std::string& k, const OwnerId& owner,
                                     const std::string& value, bool leave_queue,
                                     milliseconds tombstone) {
    return evalsha(lua::release_sha1,
                   {lock_key(k), holder_key(k), queue_key(k), queue_expiry_key(k),
                    queue_wake_key(k), tombstone_key(k, value)},
                   {owner.hex(), leave_queue ? "1" : "0", value,
                    std::to_string(value.empty() ? 0 : tombstone.count())});
  }

  // Releases `value` (and leaves the queue when `leave_queue`) on every instance, or on those
  // `only` marks; where the lock does not hold `value`, leaves a tombstone for `tombstone` ms
  // (0: none).
  Status release_keys(const LockKey& key, const OwnerId& owner, const std::string& value,
                      Clock::time_point deadline, bool leave_queue, milliseconds tombstone,
                      const std::vector<bool>& only = {}) {
    const std::string& k = key.str();
    std::string cmd = release_command(k, owner, value, leave_queue, tombstone);
    auto calls = calls_to_all(&cmd);
    if (!only.empty()) {
      for (std::size_t i = 0; i < calls.size(); ++i) {
        if (!only[i]) calls[i].commands.clear();
      }
    }
    fan_out(calls, deadline, majority_then_grace(milliseconds(2000)));
    return conclude_release(k, value, cmd, leave_queue, tombstone, calls, !only.empty());
  }

  // What the release `cmd` of `value` of lock `k` did on the instances of `calls` (fanned out;
  // those without commands were not asked): OK when a majority answered (`only`: every one
  // asked); the instances that did not answer owe it (the finisher sends it again).
  Status conclude_release(const std::string& k, const std::string& value, const std::string& cmd,
                          bool leave_queue, milliseconds tombstone,
                          std::vector<InstanceCall>& calls, bool only) {
    int answered = 0;
    int sent = 0;
    std::vector<Instance*> owing;
    std::string problems;
    for (auto& call : calls) {
      if (call.commands.empty()) continue;
      sent++;
      Status st = call.error;
      if (st.ok() && call.replies[0]->type == REDIS_REPLY_ERROR)
        st = script_error(call, call.replies[0].get());
      else if (st.ok() && !release_answered(*call.replies[0]))
        st = Status(Code::kInternal, fmt::format("{}: unexpected reply to the release script",
                                                 call.instance->address()));
      if (st.ok()) {
        answered++;
      } else {
        problems += (problems.empty() ? "" : "; ") + st.message();
      }
      // No reply, or an error reply (BUSY, LOADING, OOM: the script did not run): the attempt's
      // acquire may still run there, so its release (with the tombstone) is owed to it; the
      // finisher delivers it while the tombstone would matter, and the next attempt of this
      // Client on the same lock carries it too.
      if (!st.ok() && !value.empty() && tombstone.count() > 0) {
        owing.push_back(call.instance);
      }
      // A waiter that gives up leaves the queue everywhere: an instance that did not run the
      // leave keeps its place (for nobody) until the place expires, and every waiter behind it
      // waits for that. The finisher sends it again while the place could last.
      if (!st.ok() && leave_queue && value.empty()) {
        finisher_.finish(call.instance, k, value, cmd, Clock::now() + kQueueHold,
                         options_.io_timeout);
      }
    }
    if (!owing.empty()) {
      owed_releases_.add(k, value, static_cast<int>(owing.size()), Clock::now() + tombstone);
      for (Instance* instance : owing) {
        finisher_.finish(instance, k, value, cmd, Clock::now() + tombstone, options_.io_timeout);
      }
    }
    // Released on a majority: no later grant can be blocked by us for long (the rest expire by
    // TTL). A dead minority is not worth an error on every release. Releasing an attempt on
    // chosen instances (`only`): every one of them.
    if (!only ? has_quorum(answered, n()) : answered == sent) return Status::Ok();
    return Status(Code::kUnavailable,
                  fmt::format("released on {} of {} Redis instances; elsewhere the lock expires by "
                              "its TTL ({})",
                              answered, !only ? n() : sent, problems));
  }

  Result<std::optional<HolderRow>> inspect(const LockKey& key,
                                           Clock::time_point deadline) override {
    auto found = inspect_many({key.str()}, /*partial=*/false, deadline);
    if (!found.ok()) return found.status();
    if (found->empty()) return std::optional<HolderRow>();
    return std::optional<HolderRow>(std::move(found->front()));
  }

  Result<std::vector<HolderRow>> list(std::string_view prefix, const ListBounds& bounds) override {
    std::set<std::string> names;
    std::vector<Status> failures;
    std::size_t pages = 0;
    for (auto& instance : instances_) {
      Status scanned = scan_instance(*instance, prefix, names, bounds, pages);
      if (names.size() > bounds.max_locks) return too_many_locks(bounds.max_locks, prefix);
      if (Clock::now() >= bounds.deadline) return list_out_of_time(pages, names.size());
      if (!scanned.ok()) failures.push_back(std::move(scanned));
    }
    if (!has_quorum(n() - static_cast<int>(failures.size()), n())) {
      return no_majority_answered("SCAN", failures);
    }
    auto rows = inspect_many(std::vector<std::string>(names.begin(), names.end()),
                             /*partial=*/true, bounds.deadline);
    if (!rows.ok() && Clock::now() >= bounds.deadline) {
      return list_out_of_time(pages, names.size());
    }
    return rows;
  }

  std::string describe() const override { return description_; }

 private:
  int n() const { return static_cast<int>(instances_.size()); }

  std::vector<InstanceCall> calls_to_all(const std::string* command) {
    std::vector<InstanceCall> calls(instances_.size());
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      calls[i].instance = instances_[i].get();
      if (command) calls[i].commands.push_back(command);
    }
    return calls;
  }

  static Round1 tally_round1(std::vector<InstanceCall>& calls) {
    Round1 r;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      InstanceCall& call = calls[i];
      if (!call.error.ok()) {
        r.errors.push_back(call.error);
        continue;
      }
      const redisReply* reply = call.replies[0].get();
      if (reply->type == REDIS_REPLY_ERROR) {
        r.errors.push_back(script_error(call, reply));
        r.error_replies.emplace_back(i, r.errors.back().message());
        continue;
      }
      const auto answer = interpret_acquire_reply(*reply);
      if (!answer) {
        r.errors.emplace_back(
            Code::kInternal,
            fmt::format("{}: unexpected reply to the acquire script", call.instance->address()));
        continue;
      }
      if (answer->granted) {
        r.granted.push_back(static_cast<int>(i));
        r.counters.push_back(answer->counter);
        r.ahead_ms.push_back(answer->ahead_ms);
      } else {
        r.held_pttl.push_back(answer->retry_ms);
        r.refused.push_back(i);
      }
    }
    return r;
  }

  // Whether the warning `kind` about instance `index` is due: at most once per kWarningEvery.
  bool warning_due(std::size_t index, int kind) {
    const Clock::time_point now = Clock::now();
    MutexLock lock(warned_mu_);
    auto [at, fresh] = warned_.try_emplace({index, kind}, now);
    if (!fresh && now - at->second < kWarningEvery) return false;
    at->second = now;
    return true;
  }

  // What round 1 saw that an operator should know, even when the majority decided the round:
  // an instance that answered with an error (a failed instance of this round), and a counter far
  // ahead of its server's clock (the assumption behind tokens after a data loss, clocks that
  // agree and never step back, is in doubt: warned, not refused, since tokens stay monotonic
  // while no instance loses its data).
  void warn_about_round1(const LockKey& key, const Round1& r1) {
    for (const auto& [index, message] : r1.error_replies) {
      if (n() == 1 || !warning_due(index, 0)) continue;  // alone, its error is the answer
      detail::log(LogLevel::kWarning,
                  "{}: answered an acquisition with an error, counted as a failed instance of "
                  "the round (the others decide): {}",
                  instances_[index]->address(), message);
    }
    for (std::size_t i = 0; i < r1.granted.size(); ++i) {
      if (r1.ahead_ms[i] < kCounterAheadWarning.count()) continue;
      const auto index = static_cast<std::size_t>(r1.granted[i]);
      if (!warning_due(index, 1)) continue;
      detail::log(
          LogLevel::kWarning,
          "{}: the fencing counter of '{}' is {} ms ahead of this server's clock: its clock "
          "stepped back, or another instance's clock runs ahead (round 2 copies the "
          "largest counter). Tokens stay monotonic after this instance loses its data "
          "only if it stays down that much longer than the longest TTL; set the servers' "
          "clocks right (NTP)",
          instances_[index]->address(), key.str(), r1.ahead_ms[i]);
    }
  }

  // Round 2: raise the counter to the chosen token on the granting instances whose counter is
  // below it (max-register write-back). An instance whose counter already equals the token is
  // confirmed by round 1 itself (counters only grow), so when the instances are in step (the
  // usual case, and always for N = 1) round 2 sends nothing and costs no round trip.
  // Ends by `until` (the validity, or the caller's deadline if sooner).
  Status round2(const GrantRequest& req, const std::string& value, FencingToken token,
                const Round1& r1, Clock::time_point until) {
    int confirmed = 0;
    std::vector<InstanceCall> calls;
    const std::string& k = req.key.str();
    std::string cmd = evalsha(lua::raise_fence_sha1, {lock_key(k), fence_key(k), holder_key(k)},
                              {value, std::to_string(token.value())});
    for (std::size_t i = 0; i < r1.granted.size(); ++i) {
      if (r1.counters[i] == token.value()) {
        confirmed++;
        continue;
      }
      InstanceCall& call = calls.emplace_back();
      call.instance = instances_[static_cast<std::size_t>(r1.granted[i])].get();
      call.commands.push_back(&cmd);
    }
    // Instances already at the token that form a majority are enough: the lagging ones need no
    // write-back (the argument only needs a majority at >= the token), so nothing is sent.
    const int needed = quorum(n()) - confirmed;
    if (needed <= 0) calls.clear();
    if (!calls.empty()) {
      PipelineLimits limits = majority_then_grace(req.ttl);
      limits.enough = static_cast<std::size_t>(needed);
      fan_out(calls, std::min(until, Clock::now() + acquire_io_cap(req.ttl)), limits);
    }
    for (auto& call : calls) {
      if (call.error.ok() && raise_fence_confirmed(*call.replies[0])) confirmed++;
    }
    if (has_quorum(confirmed, n())) return Status::Ok();
    return Status(
        Code::kDeadlineExceeded,
        fmt::format("only {} of {} instances confirmed the fencing token in time (round 2)",
                    confirmed, n()));
  }

  // Why round 1 granted no majority. The instances that answered decide when they are a
  // majority (held: kLocked); an error reply is a failed instance of the round like a timeout,
  // never the verdict of a minority. Without a majority of answers, a verdict that a majority of
  // the instances gave alike (wrong credentials, missing rights: a retry cannot help) is the
  // answer; otherwise the round failed for want of a quorum.
  Status round1_failure(const Round1& r) const {
    const int answered = static_cast<int>(r.granted.size() + r.held_pttl.size());
    if (has_quorum(answered, n())) {
      return Status(Code::kLocked,
                    n() == 1 ? "key is held by another owner"
                             : fmt::format("key is held by another owner on {} of {} instances",
                                           r.held_pttl.size(), n()));
    }
    if (const Status* shared = majority_verdict(r.errors)) {
      if (n() == 1) return *shared;
      return Status(shared->code(), fmt::format("{} (and as much from a majority of the {} "
                                                "instances)",
                                                shared->message(), n()));
    }
    bool timed_out = std::any_of(r.errors.begin(), r.errors.end(), [](const Status& e) {
      return e.code() == Code::kDeadlineExceeded;
    });
    std::string detail;
    for (const Status& e : r.errors) detail += (detail.empty() ? "" : "; ") + e.message();
    if (n() == 1) return Status(timed_out ? Code::kDeadlineExceeded : Code::kUnavailable, detail);
    return Status(timed_out ? Code::kDeadlineExceeded : Code::kUnavailable,
                  fmt::format("no quorum: {} of {} Redis instances answered, {} needed ({})",
                              answered, n(), quorum(n()), detail));
  }

  // The first of `errors` whose code a majority of the instances share, if that code is a
  // verdict (credentials, rights, a failure of the script itself) rather than unavailability.
  const Status* majority_verdict(const std::vector<Status>& errors) const {
    for (const Status& e : errors) {
      if (e.code() != Code::kUnauthenticated && e.code() != Code::kPermissionDenied &&
          e.code() != Code::kInternal) {
        continue;
      }
      const auto alike = std::count_if(errors.begin(), errors.end(), [&](const Status& other) {
        return other.code() == e.code();
      });
      if (has_quorum(static_cast<int>(alike), n())) return &e;
    }
    return nullptr;
  }

  // When enough holders' keys will have expired for a majority to be possible again.
  milliseconds retry_after(const Round1& r) const {
    int free_now = static_cast<int>(r.granted.size());  // granted to us, and released since
    int needed = quorum(n()) - free_now;
    std::vector<long long> pttl = r.held_pttl;
    std::sort(pttl.begin(), pttl.end());
    if (needed <= 0 || pttl.empty()) return milliseconds(0);
    long long wait =
        pttl[static_cast<std::size_t>(std::min<int>(needed, static_cast<int>(pttl.size())) - 1)];
    if (wait < 0) wait = wait == -1 ? 1000 : 0;  // -1: a foreign holder without TTL; -2: just gone
    return milliseconds(wait);
  }

  // An inspection (list, inspect) that a majority did not answer: what a majority said alike when
  // it is a verdict (kPermissionDenied for an ACL user without rights on fencelock's keys), else
  // kUnavailable. Never "nothing held": an error reply is not an answer.
  Status no_majority_answered(std::string_view what, const std::vector<Status>& failures) const {
    if (const Status* shared = majority_verdict(failures)) return *shared;
    std::string detail;
    for (const Status& e : failures) detail += (detail.empty() ? "" : "; ") + e.message();
    return Status(Code::kUnavailable,
                  fmt::format("only {} of {} Redis instances answered {} ({})",
                              n() - static_cast<int>(failures.size()), n(), what, detail));
  }

  // Reads every page of one instance's SCAN into `names`, until the cursor comes back to 0, more
  // than bounds.max_locks names were found, or bounds.deadline passed (a server whose cursor
  // never returns to 0 is cut off there, not after its pages fill memory).
  Status scan_instance(Instance& instance, std::string_view prefix, std::set<std::string>& names,
                       const ListBounds& bounds, std::size_t& pages) {
    std::string cursor = "0";
    const std::string tag_prefix = prefix.empty() ? std::string() : hash_tag(prefix);
    std::string pattern = "fencelock:{" + glob_escape(tag_prefix) + "*}";
    while (names.size() <= bounds.max_locks && Clock::now() < bounds.deadline) {
      std::string cmd = format_command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      std::vector<InstanceCall> calls(1);
      calls[0].instance = &instance;
      calls[0].commands.push_back(&cmd);
      fan_out(calls, std::min(bounds.deadline, Clock::now() + options_.io_timeout));
      pages++;
      if (!calls[0].error.ok()) return calls[0].error;
      const redisReply* reply = calls[0].replies[0].get();
      if (reply->type == REDIS_REPLY_ERROR) {
        return status_from_error_reply(reply_text(reply), instance.address());
      }
      auto page = interpret_scan_reply(*reply);
      if (!page) {  // not SCAN's shape: this instance did not answer
        return Status(Code::kUnavailable,
                      fmt::format("{}: a reply to SCAN that is not SCAN's", instance.address()));
      }
      for (std::string_view key : page->keys) {
        std::string name = key_from_lock_key(key);
        if (!name.empty() && name.starts_with(prefix)) names.insert(name);
      }
      cursor = std::move(page->cursor);
      if (cursor == "0") return Status::Ok();
    }
    return Status::Ok();  // the caller says which bound ended it
  }

  // The majority holder of each key, if any (keys without one are left out).
  // The majority holder of each key, if any (keys without one are left out). A key is
  // answered when a majority of the instances answered it without an error reply. With
  // `partial` (list) a key that is not is left out, said once in a warning, unless none was
  // answered (then the error, as for a single key: never "nothing held").
  Result<std::vector<HolderRow>> inspect_many(
      const std::vector<std::string>& names, bool partial = false,
      Clock::time_point deadline = Clock::time_point::max()) {
    std::vector<std::string> commands;
    commands.reserve(names.size());
    for (const auto& k : names)
      commands.push_back(evalsha(lua::inspect_sha1, {lock_key(k), holder_key(k)}, {}));
    auto calls = calls_to_all(nullptr);
    for (auto& call : calls) {
      for (const auto& c : commands) call.commands.push_back(&c);
    }
    fan_out(calls, std::min(deadline, Clock::now() + options_.io_timeout));
    std::vector<Status> instance_failures;  // instances that did not answer at all
    for (auto& call : calls) {
      if (!call.error.ok()) instance_failures.push_back(call.error);
    }
    if (!has_quorum(n() - static_cast<int>(instance_failures.size()), n())) {
      return no_majority_answered("the inspection", instance_failures);
    }
    std::vector<HolderRow> out;
    std::vector<Status> key_failures;  // per key left out: the errors of its instances, first
    std::size_t left_out = 0;
    for (std::size_t k = 0; k < names.size(); ++k) {
      struct Seen {
        int count = 0;
        long long pttl = 0;
        std::uint64_t token = 0;
        std::string meta;
      };
      std::map<std::string, Seen> owners;
      std::vector<Status> failures = instance_failures;
      for (auto& call : calls) {
        if (!call.error.ok()) continue;
        const redisReply* reply = call.replies[k].get();
        if (reply->type == REDIS_REPLY_ERROR) {  // NOPERM on this key, a key of the wrong type
          failures.push_back(script_error(call, reply));
          continue;
        }
        const auto holder = interpret_inspect_reply(*reply);
        if (!holder) continue;
        Seen& s = owners[holder->owner];
        s.pttl = s.count == 0 ? holder->pttl : std::min(s.pttl, holder->pttl);
        s.count++;
        if (holder->token >= s.token) {
          s.token = holder->token;
          s.meta = holder->metadata;
        }
      }
      if (!has_quorum(n() - static_cast<int>(failures.size()), n())) {
        const Status why = no_majority_answered("the inspection", failures);
        if (!partial || names.size() == 1) return why;
        if (left_out++ == 0) key_failures.push_back(why);
        continue;
      }
      for (auto& [owner, s] : owners) {
        if (!has_quorum(s.count, n())) continue;
        out.push_back(HolderRow{
            names[k], owner.substr(0, 8),
            s.token == 0 ? std::nullopt : std::optional<FencingToken>(FencingToken(s.token)),
            milliseconds(std::max<long long>(s.pttl, 0)), s.meta});
      }
    }
    if (left_out > 0 && left_out == names.size()) return key_failures.front();
    if (left_out > 0) {
      detail::log(LogLevel::kWarning,
                  "list: left out {} held lock(s) that could not be inspected (the first: {})",
                  left_out, key_failures.front().message());
    }
    return out;
  }

  const ClientOptions options_;
  const std::size_t renew_batch_;
  const std::string description_;
  std::vector<std::unique_ptr<Instance>> instances_;
  ReleaseHub hub_;
  Mutex warned_mu_;
  // (instance, kind of warning) -> when warning_due() last let it through.
  std::map<std::pair<std::size_t, int>, Clock::time_point> warned_ FENCELOCK_GUARDED_BY(warned_mu_);
  // Releases still owed to an instance that did not answer one, per lock for the next attempt to
  // carry, and delivered in the background (after instances_ and owed_releases_: its thread is
  // stopped first).
  OwedReleases owed_releases_;
  ReleaseFinisher finisher_{&owed_releases_};
};

}  // namespace
}  // namespace redis

Result<std::unique_ptr<Backend>> make_redis_backend(const ParsedUri& uri,
                                                    const ClientOptions& options, bool check_only) {
  using namespace redis;
  const bool redlock = uri.scheme == "redlock";
  if (uri.endpoints.empty()) {
    return Status(
        Code::kInvalidArgument,
        fmt::format("malformed backend URI: no host (e.g. {}://127.0.0.1:6379)", uri.scheme));
  }
  if (!redlock && uri.endpoints.size() != 1) {
    return Status(
        Code::kInvalidArgument,
        "malformed backend URI: redis:// takes one host; use redlock://h1,h2,h3 for several");
  }
  for (std::size_t i = 0; i < uri.endpoints.size(); ++i) {
    for (std::size_t j = i + 1; j < uri.endpoints.size(); ++j) {
      if (uri.endpoints[i] == uri.endpoints[j]) {
        return Status(
            Code::kInvalidArgument,
            fmt::format("malformed backend URI: instance {}:{} is listed twice (a majority "
                        "must be of distinct instances)",
                        uri.endpoints[i].host, uri.endpoints[i].port));
      }
    }
  }
  auto query = parse_redis_options(uri);
  if (!query.ok()) return query.status();
  const std::size_t renew_batch = query->renew_batch;
  const bool allow_eviction = query->allow_eviction;

  // Accepted, but said once: fewer than 3 instances tolerate no failure, and an even number no
  // more failures than one instance fewer would.
  if (const std::size_t n = uri.endpoints.size(); redlock && (n < 3 || n % 2 == 0)) {
    const int size = static_cast<int>(n);
    const int tolerated = size - quorum(size);
    detail::log(LogLevel::kWarning, "{}",
                n < 3 ? fmt::format("redlock:// with {} instance{} tolerates no failure (a "
                                    "majority of {} is {}); use 3 or 5 instances",
                                    n, n == 1 ? "" : "s", n, quorum(size))
                      : fmt::format("redlock:// with {} instances tolerates {} failure{}, no more "
                                    "than {} would: use an odd number of instances",
                                    n, tolerated, tolerated == 1 ? "" : "s", n - 1));
  }
  auto made = connect_specs(uri, options.connect_timeout);
  if (!made.ok()) return made.status();
  if (check_only) return std::unique_ptr<Backend>();
  std::vector<ConnectSpec> specs = std::move(*made);
  for (ConnectSpec& spec : specs) {
    spec.scripts = {lua::acquire, lua::raise_fence, lua::renew, lua::release, lua::inspect};
  }
  auto backend = std::make_unique<RedlockBackend>(specs, options, redact(uri), renew_batch);

  // Connect now, so that bad credentials and dead servers are reported by connect(). Every
  // instance at once, under one deadline: ten silent instances cost one connect_timeout, not ten.
  const auto& instances = backend->instances();
  const Clock::time_point deadline = deadline_after(Clock::now(), options.connect_timeout);
  std::vector<Status> outcomes(instances.size());
  {
    std::vector<std::jthread> connecting;
    connecting.reserve(instances.size());
    for (std::size_t i = 0; i < instances.size(); ++i) {
      connecting.emplace_back([&, i] {
        auto c = instances[i]->checkout(deadline);
        if (!c.ok()) {
          outcomes[i] = c.status();
          return;
        }
        outcomes[i] = check_eviction_policy(**c, allow_eviction, deadline);
        if (outcomes[i].ok()) instances[i]->checkin(std::move(*c));
      });
    }
  }  // joined
  int reachable = 0;
  std::string problems;
  for (const Status& outcome : outcomes) {
    // A refused policy or credentials: the same answer on a retry, so say it now.
    if (outcome.code() == Code::kInvalidArgument || outcome.code() == Code::kUnauthenticated ||
        outcome.code() == Code::kPermissionDenied) {
      return outcome;
    }
    if (outcome.ok()) {
      reachable++;
    } else {
      problems += (problems.empty() ? "" : "; ") + outcome.message();
    }
  }
  int n = static_cast<int>(specs.size());
  if (!has_quorum(reachable, n)) {
    if (n == 1) return Status(Code::kUnavailable, problems);
    return Status(
        Code::kUnavailable,
        fmt::format("cannot reach a majority of the Redis instances ({} of {} answered, {} "
                    "needed): {}",
                    reachable, n, quorum(n), problems));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace fencelock::detail
