// docs/PROTOCOLS.md, "Redis and Redlock", "Fencing for N > 1": why Redlock needs a second round to
// hand out fencing tokens that only grow, shown on a deterministic simulation (no Redis, no
// threads).
//
// Each simulated instance holds what the Lua scripts of src/redis/scripts/ touch: the lock's owner
// and expiry, and the key's fence counter. Time is a plain integer clock advanced by the test.
//
//  - Round 1 (acquire.lua) on one instance: if the lock is free (absent or expired), set
//    owner+expiry, INCR the counter and return it; otherwise refuse.
//  - The client takes t = max of the counters over the instances it won (select_token) and needs a
//    majority of them (quorum / has_quorum).
//  - Round 2 (raise_fence.lua) on one instance: if the owner still matches there, set
//    counter = max(counter, t). The grant stands only if a majority confirms.
//  - On any failure the client releases (compare owner and delete) wherever it won.
//
// Why round 1 alone is not enough: each counter only grows, but t is a maximum over one majority,
// and two grants may use different majorities. An instance that took many grants which never
// reached a majority has a large counter; a grant through it yields a large t, and a later grant
// through a majority that avoids it yields a smaller one: the token goes backwards.
//
// Why round 2 is enough: let grant X be confirmed (round 2 done on a majority Q_X) before grant Y
// is confirmed on a majority Q_Y. Two majorities of one cluster intersect, say at instance k. At k,
// X's key was present when X's round 2 ran, and Y's key was present from Y's round 1 until Y's
// round 2. The two keys cannot be present at once, so Y's round 1 (its INCR at k) came after X's
// round 2 had raised k's counter to >= t_X. Hence Y's counter at k is > t_X, and so is t_Y.
// A holder paused between the rounds cannot break this: if its keys expired meanwhile, its round 2
// finds other owners (or nothing) and fails the majority check, so no grant carries its stale t.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/quorum.h"
#include "fencelock/types.h"
#include "unit/printers.h"

namespace fencelock::detail {
namespace {

using Time = std::int64_t;       // simulated milliseconds
using OwnerTag = std::uint64_t;  // one per acquisition attempt, as a fresh OwnerId is
using Reachable = std::vector<bool>;

constexpr Time kTtl = 100;

struct Instance {
  std::optional<OwnerTag> owner;
  Time expiry = 0;
  std::uint64_t fence = 0;
};

// An acquisition between its two rounds: round 1 won a majority and chose `token`.
struct Pending {
  OwnerTag owner;
  std::vector<int> won;
  FencingToken token;
};

class SimulatedRedlock {
 public:
  explicit SimulatedRedlock(int n) : instances_(static_cast<std::size_t>(n)) {}

  int size() const { return static_cast<int>(instances_.size()); }
  Time now() const { return now_; }
  void advance(Time d) { now_ += d; }
  const Instance& instance(int i) const { return instances_[static_cast<std::size_t>(i)]; }
  Reachable all() const { return Reachable(instances_.size(), true); }

  // acquire.lua on one instance: the new counter, or nullopt when the lock is held there.
  std::optional<std::uint64_t> round1_on(int i, OwnerTag owner) {
    Instance& in = at(i);
    if (held(in)) return std::nullopt;
    in.owner = owner;
    in.expiry = now_ + kTtl;
    return ++in.fence;
  }

  // raise_fence.lua on one instance: true when `owner` still holds the lock there.
  bool round2_on(int i, OwnerTag owner, FencingToken t) {
    Instance& in = at(i);
    if (!held_by(in, owner)) return false;
    in.fence = std::max(in.fence, t.value());
    return true;
  }

  // release.lua on one instance: compare owner, delete.
  void release_on(int i, OwnerTag owner) {
    Instance& in = at(i);
    if (held_by(in, owner)) in.owner.reset();
  }

  void release(OwnerTag owner, const std::vector<int>& where, const Reachable& reachable) {
    for (int i : where) {
      if (reachable[static_cast<std::size_t>(i)]) release_on(i, owner);
    }
  }

  // Round 1 on every reachable instance. Without a majority it releases what it won (as the
  // client does) and returns nullopt.
  std::optional<Pending> round1(OwnerTag owner, const Reachable& reachable) {
    std::vector<int> won;
    std::vector<std::uint64_t> counters;
    for (int i = 0; i < size(); ++i) {
      if (!reachable[static_cast<std::size_t>(i)]) continue;
      if (auto counter = round1_on(i, owner)) {
        won.push_back(i);
        counters.push_back(*counter);
      }
    }
    if (!has_quorum(static_cast<int>(won.size()), size())) {
      release(owner, won, reachable);
      return std::nullopt;
    }
    return Pending{owner, won, *select_token(counters)};
  }

  // Round 2 on the instances round 1 won (those reachable now). The granted token, or nullopt
  // (after releasing) when fewer than a majority confirm.
  std::optional<FencingToken> round2(const Pending& p, const Reachable& reachable) {
    int confirmed = 0;
    for (int i : p.won) {
      if (reachable[static_cast<std::size_t>(i)] && round2_on(i, p.owner, p.token)) ++confirmed;
    }
    if (!has_quorum(confirmed, size())) {
      release(p.owner, p.won, reachable);
      return std::nullopt;
    }
    return p.token;
  }

  // One whole acquisition with no pause between the rounds.
  std::optional<FencingToken> acquire(OwnerTag client, const Reachable& reachable,
                                      bool with_round2) {
    std::optional<Pending> p = round1(client, reachable);
    if (!p) return std::nullopt;
    if (!with_round2) return p->token;
    return round2(*p, reachable);
  }

 private:
  Instance& at(int i) { return instances_[static_cast<std::size_t>(i)]; }
  bool held(const Instance& in) const { return in.owner.has_value() && in.expiry > now_; }
  bool held_by(const Instance& in, OwnerTag owner) const { return held(in) && in.owner == owner; }

  std::vector<Instance> instances_;
  Time now_ = 0;
};

Reachable only(int n, std::initializer_list<int> up) {
  Reachable r(static_cast<std::size_t>(n), false);
  for (int i : up) r[static_cast<std::size_t>(i)] = true;
  return r;
}

// Grants that reach one instance only: it increments that instance's counter, finds no majority
// and releases. This is how one instance's counter runs ahead of the others in real life (a
// partition, or a client whose other requests timed out).
void bump_alone(SimulatedRedlock& sim, int instance, int times, OwnerTag& next_owner) {
  for (int k = 0; k < times; ++k) {
    EXPECT_EQ(sim.acquire(next_owner++, only(sim.size(), {instance}), /*with_round2=*/true),
              std::nullopt)
        << "a single instance is not a majority";
  }
}

// --- the concrete scenario of docs/PROTOCOLS.md, "Redis and Redlock"
// ------------------------------------------------------

// A: counter bumped to 5 by minority attempts. X wins {A,B}: t = max(6, 1) = 6. X's lease expires
// (X crashed or is paused). Y then wins {B,C}.
struct Scenario {
  std::optional<FencingToken> x;
  std::optional<FencingToken> y;
};

Scenario run_divergent_majorities(bool with_round2) {
  constexpr int A = 0, B = 1, C = 2;
  SimulatedRedlock sim(3);
  OwnerTag next = 1;
  bump_alone(sim, A, 5, next);
  EXPECT_EQ(sim.instance(A).fence, 5u);
  Scenario s;
  s.x = sim.acquire(next++, only(3, {A, B}), with_round2);
  sim.advance(kTtl);  // X's keys expire: it never released
  s.y = sim.acquire(next++, only(3, {B, C}), with_round2);
  return s;
}

TEST(Round2Simulation, WithoutRound2ATokenFromAnotherMajorityGoesBackwards) {
  Scenario s = run_divergent_majorities(/*with_round2=*/false);
  ASSERT_TRUE(s.x && s.y);
  EXPECT_EQ(*s.x, FencingToken(6));  // max(A=6, B=1)
  EXPECT_EQ(*s.y, FencingToken(2));  // max(B=2, C=1)
  EXPECT_LT(*s.y, *s.x) << "the later grant's token is smaller: fencing is broken";
}

TEST(Round2Simulation, WithRound2TheSameScenarioGivesAnIncreasingToken) {
  Scenario s = run_divergent_majorities(/*with_round2=*/true);
  ASSERT_TRUE(s.x && s.y);
  EXPECT_EQ(*s.x, FencingToken(6));  // round 2 raised B to 6
  EXPECT_EQ(*s.y, FencingToken(7));  // B: INCR from 6
  EXPECT_GT(*s.y, *s.x);
}

TEST(Round2Simulation, WithRound2FiveInstancesGiveAnIncreasingToken) {
  constexpr int A = 0, B = 1, C = 2, D = 3, E = 4;
  for (bool with_round2 : {false, true}) {
    SimulatedRedlock sim(5);
    OwnerTag next = 1;
    bump_alone(sim, A, 9, next);
    bump_alone(sim, B, 4, next);
    auto x = sim.acquire(next++, only(5, {A, B, C}), with_round2);
    sim.advance(kTtl);
    auto y = sim.acquire(next++, only(5, {C, D, E}), with_round2);
    ASSERT_TRUE(x && y);
    EXPECT_EQ(*x, FencingToken(10));
    if (with_round2) {
      EXPECT_EQ(*y, FencingToken(11)) << "C carries X's token into Y's majority";
    } else {
      EXPECT_EQ(*y, FencingToken(2)) << "without round 2 nothing carries X's token to C";
    }
  }
}

TEST(Round2Simulation, HolderPausedBetweenTheRoundsIsNotGrantedItsStaleToken) {
  constexpr int A = 0, B = 1, C = 2;
  SimulatedRedlock sim(3);
  OwnerTag next = 1;
  bump_alone(sim, A, 5, next);

  // X finishes round 1 on {A,B} with t = 6, then stalls (GC pause) until its keys expire.
  std::optional<Pending> x = sim.round1(next++, only(3, {A, B}));
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->token, FencingToken(6));
  sim.advance(kTtl);

  // Y is granted through {B,C} meanwhile, with the small token 2 (B and C never saw 6).
  const OwnerTag y_owner = next++;
  std::optional<FencingToken> y = sim.acquire(y_owner, only(3, {B, C}), /*with_round2=*/true);
  ASSERT_TRUE(y.has_value());
  EXPECT_EQ(*y, FencingToken(2));

  // X resumes: A's key expired, B belongs to Y. No majority confirms, so X gets no grant and its
  // token 6 is never handed out after the smaller 2.
  EXPECT_FALSE(sim.round2_on(A, x->owner, x->token));
  EXPECT_FALSE(sim.round2_on(B, x->owner, x->token));
  EXPECT_EQ(sim.round2(*x, sim.all()), std::nullopt);
  EXPECT_EQ(sim.instance(B).owner, y_owner) << "X's failed round 2 and release leave Y's key alone";
  EXPECT_EQ(sim.instance(B).fence, 2u) << "a failed round 2 raises nothing";
}

TEST(Round2Simulation, HolderPausedBrieflyIsStillGranted) {
  constexpr int A = 0, B = 1;
  SimulatedRedlock sim(3);
  OwnerTag next = 1;
  std::optional<Pending> x = sim.round1(next++, only(3, {A, B}));
  ASSERT_TRUE(x.has_value());
  sim.advance(kTtl - 1);  // still valid
  EXPECT_EQ(sim.round2(*x, sim.all()), x->token);
}

TEST(Round2Simulation, Round2NeedsAMajorityOfConfirmationsNotJustOne) {
  constexpr int A = 0, B = 1, C = 2;
  SimulatedRedlock sim(3);
  OwnerTag next = 1;
  std::optional<Pending> x = sim.round1(next++, only(3, {A, B, C}));
  ASSERT_TRUE(x.has_value());
  // Only A answers round 2: one confirmation out of three is no grant.
  EXPECT_EQ(sim.round2(*x, only(3, {A})), std::nullopt);
  // The failed acquisition released A (reachable); B and C keep X's key until it expires.
  EXPECT_FALSE(sim.instance(A).owner.has_value());
  EXPECT_EQ(sim.instance(B).owner, x->owner);
  EXPECT_EQ(sim.instance(C).owner, x->owner);
}

TEST(Round2Simulation, SingleInstanceCounterIsMonotonicWithoutRound2) {
  // N = 1: every grant goes through the same counter, so round 1 alone is monotonic.
  SimulatedRedlock sim(1);
  OwnerTag next = 1;
  std::uint64_t last = 0;
  for (int k = 0; k < 100; ++k) {
    auto t = sim.acquire(next++, sim.all(), /*with_round2=*/false);
    ASSERT_TRUE(t.has_value());
    EXPECT_GT(t->value(), last);
    last = t->value();
    if (k % 2 == 0)
      sim.advance(kTtl);  // expire half of them, release the others
    else
      sim.release_on(0, next - 1);
  }
}

// --- seeded exploration --------------------------------------------------------------------------

// Tokens of successful grants, in the order the grants were issued.
struct GrantLog {
  std::vector<FencingToken> tokens;
  int decreases = 0;  // grants whose token is not above the previous grant's

  void record(FencingToken t) {
    if (!tokens.empty() && !(t > tokens.back())) ++decreases;
    tokens.push_back(t);
  }
};

struct Client {
  enum State { kIdle, kPaused, kHolding } state = kIdle;
  std::optional<Pending> pending;  // round 1 done, round 2 not yet (kPaused)
  OwnerTag owner = 0;
  std::vector<int> won;
};

// Random schedules of acquire / pause between the rounds / resume / release / clock advance,
// over random reachable subsets. The schedule is drawn from the seed only, never from the state,
// so both modes replay the very same schedule. Without round 2 a grant is issued at the end of
// round 1 (a pause then changes nothing about the token); with round 2 it is issued when round 2
// is confirmed.
GrantLog explore(int n, std::uint64_t seed, int steps, bool with_round2) {
  SimulatedRedlock sim(n);
  std::mt19937_64 rng(seed);
  std::vector<Client> clients(4);
  GrantLog log;
  OwnerTag next = 1;
  for (int step = 0; step < steps; ++step) {
    const int action = static_cast<int>(rng() % 100);
    Client& c = clients[rng() % clients.size()];
    Reachable reachable(static_cast<std::size_t>(n));
    for (auto&& reached : reachable) reached = rng() % 100 < 70;
    const Time advance_by = static_cast<Time>(rng() % (kTtl / 2 + 1));
    const bool pause_between_rounds = rng() % 4 == 0;

    if (action < 45) {  // begin an acquisition
      if (c.state != Client::kIdle) continue;
      c.owner = next++;
      std::optional<Pending> p = sim.round1(c.owner, reachable);
      if (!p) continue;
      c.won = p->won;
      if (!with_round2) {
        log.record(p->token);
        c.state = Client::kHolding;
      } else if (pause_between_rounds) {
        c.pending = p;
        c.state = Client::kPaused;
      } else if (auto t = sim.round2(*p, reachable)) {
        log.record(*t);
        c.state = Client::kHolding;
      }
    } else if (action < 60) {  // a paused client resumes with round 2
      if (c.state != Client::kPaused) continue;
      std::optional<FencingToken> t = sim.round2(*c.pending, reachable);
      c.pending.reset();
      c.state = t ? Client::kHolding : Client::kIdle;
      if (t) log.record(*t);
    } else if (action < 80) {  // a holder releases (unreachable instances keep its key)
      if (c.state != Client::kHolding) continue;
      sim.release(c.owner, c.won, reachable);
      c.state = Client::kIdle;
    } else {  // time passes: leases of crashed, slow or paused holders expire
      sim.advance(advance_by);
      for (Client& other : clients) {
        const bool crashes = rng() % 3 == 0;  // drawn for every client: the schedule ignores state
        if (other.state == Client::kHolding && crashes) other.state = Client::kIdle;
      }
    }
  }
  return log;
}

constexpr std::uint64_t kSeed = 20240607;
constexpr int kSteps = 10'000;

TEST(Round2Simulation, SeededExplorationWithRound2GrantsStrictlyIncreasingTokensOnThree) {
  GrantLog log = explore(3, kSeed, kSteps, /*with_round2=*/true);
  EXPECT_GT(log.tokens.size(), 300u) << "the exploration must actually grant";
  EXPECT_EQ(log.decreases, 0);
  for (std::size_t i = 1; i < log.tokens.size(); ++i) {
    ASSERT_GT(log.tokens[i], log.tokens[i - 1]) << "grant #" << i;
  }
}

TEST(Round2Simulation, SeededExplorationWithoutRound2SeesTokensGoBackwardsOnThree) {
  GrantLog log = explore(3, kSeed, kSteps, /*with_round2=*/false);
  EXPECT_GT(log.tokens.size(), 300u);
  RecordProperty("grants", static_cast<int>(log.tokens.size()));
  RecordProperty("decreases", log.decreases);
  EXPECT_GE(log.decreases, 1) << "the same schedule without round 2 must break monotonicity, "
                                 "otherwise this exploration proves nothing";
}

TEST(Round2Simulation, SeededExplorationWithRound2GrantsStrictlyIncreasingTokensOnFive) {
  GrantLog log = explore(5, kSeed, kSteps, /*with_round2=*/true);
  EXPECT_GT(log.tokens.size(), 300u);
  EXPECT_EQ(log.decreases, 0);
}

TEST(Round2Simulation, SeededExplorationWithoutRound2SeesTokensGoBackwardsOnFive) {
  GrantLog log = explore(5, kSeed, kSteps, /*with_round2=*/false);
  EXPECT_GE(log.decreases, 1);
}

TEST(Round2Simulation, ManySeedsWithRound2NeverDecrease) {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    for (int n : {3, 5, 7}) {
      EXPECT_EQ(explore(n, seed, 2'000, /*with_round2=*/true).decreases, 0)
          << "seed " << seed << ", n " << n;
    }
  }
}

TEST(Round2Simulation, SingleInstanceExplorationIsMonotonicWithoutRound2) {
  EXPECT_EQ(explore(1, kSeed, kSteps, /*with_round2=*/false).decreases, 0);
}

}  // namespace
}  // namespace fencelock::detail
