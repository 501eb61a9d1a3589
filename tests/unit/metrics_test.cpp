// Specification of Client::metrics() and to_prometheus() (fencelock/metrics.h): every
// acquisition, release, renewal and loss of a Client is counted once, latency histograms count
// one observation per operation in cumulative buckets, and the Prometheus text is well formed.
//
// Clients use the in-process memory:// backend, one table per test so that tests never contend.
#include "fencelock/metrics.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/metrics.h"
#include "core/reconnects.h"
#include "fencelock/client.h"
#include "support/process.h"
#include "unit/printers.h"

namespace fencelock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Client connect(const std::string& uri) {
  auto client = Client::connect(uri);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return std::move(client).value();
}

LockKey key(const std::string& name) { return *LockKey::make(name); }

using testing::eventually;

void expect_cumulative(const LatencyHistogram& h, const char* name) {
  for (std::size_t i = 1; i < h.buckets.size(); ++i) {
    EXPECT_LE(h.buckets[i - 1], h.buckets[i]) << name << " bucket " << i << " is not cumulative";
  }
  EXPECT_LE(h.buckets.back(), h.count) << name;
}

TEST(Metrics, NewClientCountsNothing) {
  Client client = connect("memory://metrics-new");
  MetricsSnapshot m = client.metrics();
  EXPECT_EQ(m.acquisitions, 0u);
  EXPECT_EQ(m.grants, 0u);
  EXPECT_EQ(m.releases, 0u);
  EXPECT_EQ(m.acquire_latency.count, 0u);
  EXPECT_EQ(m.acquire_latency.sum, 0ns);
}

TEST(Metrics, CountsEachGrantAndReleaseOnceWithOneLatencyObservationEach) {
  Client client = connect("memory://metrics-grants");
  constexpr std::uint64_t kRounds = 5;
  for (std::uint64_t i = 0; i < kRounds; ++i) {
    auto lease = client.acquire(key("jobs"), {.ttl = 10s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    ASSERT_TRUE(lease->release().ok());
  }
  MetricsSnapshot m = client.metrics();
  EXPECT_EQ(m.acquisitions, kRounds);
  EXPECT_EQ(m.grants, kRounds);
  EXPECT_EQ(m.releases, kRounds);
  EXPECT_EQ(m.release_failures, 0u);
  EXPECT_EQ(m.contended, 0u);
  EXPECT_EQ(m.losses, 0u) << "a release is not a loss";
  EXPECT_EQ(m.acquire_latency.count, kRounds);
  EXPECT_EQ(m.release_latency.count, kRounds);
  EXPECT_EQ(m.wait_latency.count, 0u) << "no acquisition was allowed to wait";
  EXPECT_GT(m.acquire_latency.sum, 0ns);
  expect_cumulative(m.acquire_latency, "acquire");
  expect_cumulative(m.release_latency, "release");
}

TEST(Metrics, TheDestructorsReleaseIsCountedToo) {
  Client client = connect("memory://metrics-destructor");
  { auto lease = client.acquire(key("jobs")); }
  EXPECT_EQ(client.metrics().releases, 1u);
}

TEST(Metrics, CopiesOfAClientShareOneSetOfCountersButOtherClientsDoNot) {
  Client client = connect("memory://metrics-copies");
  Client copy = client;
  Client other = connect("memory://metrics-copies");
  ASSERT_TRUE(copy.acquire(key("a")).ok());
  EXPECT_EQ(client.metrics().grants, 1u);
  EXPECT_EQ(other.metrics().grants, 0u);
}

TEST(Metrics, AWaitThatRunsOutIsContentionAndATimeoutATryOnceIsOnlyContention) {
  Client holder = connect("memory://metrics-contention");
  Client waiter = connect("memory://metrics-contention");
  auto held = holder.acquire(key("jobs"));
  ASSERT_TRUE(held.ok());

  auto waited = waiter.acquire(key("jobs"), {.wait = 30ms});
  EXPECT_EQ(waited.code(), Code::kLocked);
  auto tried = waiter.acquire(key("jobs"));
  EXPECT_EQ(tried.code(), Code::kLocked);

  MetricsSnapshot m = waiter.metrics();
  EXPECT_EQ(m.acquisitions, 2u);
  EXPECT_EQ(m.grants, 0u);
  EXPECT_EQ(m.contended, 2u);
  EXPECT_EQ(m.timeouts, 1u);
  EXPECT_EQ(m.acquire_errors[static_cast<std::size_t>(Code::kLocked)], 2u);
  EXPECT_EQ(m.acquire_latency.count, 2u);
  EXPECT_EQ(m.wait_latency.count, 1u) << "only the acquisition with wait > 0";
  EXPECT_GE(m.wait_latency.sum, 30ms) << "it waited the whole wait";
  EXPECT_EQ(holder.metrics().contended, 0u);
}

TEST(ReconnectCounter, CountsOneRecoveryPerOutageAndNotTheFirstConnection) {
  detail::ReconnectCounter counter;
  counter.connected();
  EXPECT_EQ(counter.count(), 0u) << "the first connection";
  counter.failed();
  counter.failed();  // retries while the server stays down
  EXPECT_EQ(counter.count(), 0u) << "not back yet";
  counter.connected();
  counter.connected();
  EXPECT_EQ(counter.count(), 1u) << "one outage, one reconnect";
  counter.failed();
  counter.connected();
  EXPECT_EQ(counter.count(), 2u);
}

TEST(Metrics, CancelledAndInvalidAcquisitionsAreCountedByCode) {
  Client client = connect("memory://metrics-codes");
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(client.acquire(key("k"), {.wait = 1s, .stop = stop.get_token()}).code(),
            Code::kCancelled);
  EXPECT_EQ(client.acquire(key("k"), {.ttl = 0ms}).code(), Code::kInvalidArgument);

  MetricsSnapshot m = client.metrics();
  EXPECT_EQ(m.acquisitions, 2u);
  EXPECT_EQ(m.cancellations, 1u);
  EXPECT_EQ(m.acquire_errors[static_cast<std::size_t>(Code::kCancelled)], 1u);
  EXPECT_EQ(m.acquire_errors[static_cast<std::size_t>(Code::kInvalidArgument)], 1u);
  EXPECT_EQ(m.acquire_errors[static_cast<std::size_t>(Code::kOk)], 0u);
  EXPECT_EQ(m.contended, 0u);
  EXPECT_EQ(m.quorum_failures, 0u);
}

TEST(Metrics, ALeaseThatExpiresIsOneLossAndItsLaterReleaseIsNotAnother) {
  Client client = connect("memory://metrics-loss");
  auto lease = client.acquire(key("k"), {.ttl = 40ms, .renew = false});
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(eventually([&] { return lease->is_lost(); })) << "lost() never fired";
  // The loss is recorded before lost() fires.
  EXPECT_EQ(client.metrics().losses, 1u);
  (void)lease->release();
  EXPECT_EQ(client.metrics().losses, 1u);
  EXPECT_EQ(client.metrics().renewals, 0u) << "renewal was off";
}

TEST(Metrics, RenewalRoundsAreCountedAndTimed) {
  Client client = connect("memory://metrics-renew");
  auto lease = client.acquire(key("k"), {.ttl = 60ms});
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(eventually([&] { return client.metrics().renewals >= 2; })) << "never renewed twice";
  MetricsSnapshot m = client.metrics();
  EXPECT_EQ(m.renewal_failures, 0u);
  EXPECT_GE(m.renew_latency.count, 2u) << "one observation per round";
  EXPECT_EQ(m.losses, 0u);
  EXPECT_FALSE(lease->is_lost());
}

TEST(Histogram, BucketBoundsAreInclusiveUpperBounds) {
  using detail::Histogram;
  EXPECT_EQ(Histogram::bucket_index(0ns), 0u);
  EXPECT_EQ(Histogram::bucket_index(100us), 0u);
  EXPECT_EQ(Histogram::bucket_index(100us + 1ns), 1u);
  EXPECT_EQ(Histogram::bucket_index(1ms), 3u);
  EXPECT_EQ(Histogram::bucket_index(60s), LatencyHistogram::kBounds.size() - 1);
  EXPECT_EQ(Histogram::bucket_index(60s + 1ns), LatencyHistogram::kBounds.size()) << "+Inf";
}

TEST(Histogram, SnapshotIsCumulativeAndCountsEveryObservationIncludingOverflow) {
  detail::Histogram h;
  for (std::chrono::microseconds d : {50us, 1000us, 1000us, 2000000us, 90000000us}) h.observe(d);
  h.observe(-5ms);  // a clock step backwards counts as 0, not as a huge value
  LatencyHistogram s = h.snapshot();
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.sum, 50us + 1ms + 1ms + 2s + 90s);
  EXPECT_EQ(s.buckets[0], 2u);      // <= 100 us: 50 us and the clamped 0
  EXPECT_EQ(s.buckets[2], 2u);      // <= 500 us
  EXPECT_EQ(s.buckets[3], 4u);      // <= 1 ms
  EXPECT_EQ(s.buckets[12], 4u);     // <= 1 s
  EXPECT_EQ(s.buckets[13], 5u);     // <= 2.5 s
  EXPECT_EQ(s.buckets.back(), 5u);  // <= 60 s: 90 s is only in +Inf
  expect_cumulative(s, "histogram");
}

TEST(Histogram, ConcurrentObservationsAreAllCounted) {
  detail::Histogram h;
  constexpr int kThreads = 4;
  constexpr int kEach = 10'000;
  {
    std::vector<std::jthread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kEach; ++i) h.observe(std::chrono::microseconds(i));
      });
    }
  }
  EXPECT_EQ(h.snapshot().count, static_cast<std::uint64_t>(kThreads * kEach));
}

// One parsed sample line: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // values unescaped
  double value = 0;
};

std::string unescape(const std::string& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '\\' && i + 1 < v.size()) {
      ++i;
      out += v[i] == 'n' ? '\n' : v[i];
    } else {
      out += v[i];
    }
  }
  return out;
}

// Parses the exposition text strictly: every line is a HELP, a TYPE or a sample; HELP and TYPE
// come once per family, before its samples; every sample belongs to a declared family.
struct Parsed {
  std::map<std::string, std::string> types;  // family -> counter | histogram
  std::vector<Sample> samples;
  std::vector<std::string> errors;
};

Parsed parse_exposition(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\} (\S+))");
  static const std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)\")");
  Parsed p;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      if (!helped.insert(m[1]).second) p.errors.push_back("second HELP: " + line);
    } else if (std::regex_match(line, m, type)) {
      if (!helped.count(m[1])) p.errors.push_back("TYPE before HELP: " + line);
      if (!p.types.emplace(m[1], m[2]).second) p.errors.push_back("second TYPE: " + line);
    } else if (std::regex_match(line, m, sample)) {
      Sample s{m[1], {}, 0};
      const std::string labels = m[2];
      for (std::sregex_iterator it(labels.begin(), labels.end(), label), end; it != end; ++it) {
        s.labels[(*it)[1]] = unescape((*it)[2]);
      }
      const std::string value = m[3];
      char* rest = nullptr;
      s.value = std::strtod(value.c_str(), &rest);
      if (rest == value.c_str() || *rest != '\0') p.errors.push_back("bad value: " + line);
      std::string family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (!p.types.count(family) && family.ends_with(suffix)) {
          family.resize(family.size() - std::string(suffix).size());
        }
      }
      if (!p.types.count(family)) p.errors.push_back("sample of an undeclared family: " + line);
      p.samples.push_back(std::move(s));
    } else {
      p.errors.push_back("malformed line: '" + line + "'");
    }
  }
  return p;
}

std::vector<Sample> samples_named(const Parsed& p, const std::string& name) {
  std::vector<Sample> out;
  for (const Sample& s : p.samples) {
    if (s.name == name) out.push_back(s);
  }
  return out;
}

TEST(Prometheus, TextIsWellFormedAndCountsMatchTheSnapshot) {
  Client client = connect("memory://metrics-prometheus");
  for (int i = 0; i < 3; ++i) {
    auto lease = client.acquire(key("k"));
    ASSERT_TRUE(lease.ok());
  }
  (void)client.acquire(key("held-by-nobody"), {.ttl = 0ms});  // one invalid_argument error
  MetricsSnapshot m = client.metrics();
  const std::string text = to_prometheus(m, client.describe());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');

  Parsed p = parse_exposition(text);
  EXPECT_TRUE(p.errors.empty()) << ::testing::PrintToString(p.errors) << "\n" << text;

  auto grants = samples_named(p, "fencelock_grants_total");
  ASSERT_EQ(grants.size(), 1u) << text;
  EXPECT_EQ(grants[0].value, 3);
  EXPECT_EQ(grants[0].labels.at("backend"), client.describe());
  EXPECT_EQ(p.types["fencelock_grants_total"], "counter");
  for (const char* counter : {"fencelock_contended_grants_total", "fencelock_reconnects_total"}) {
    EXPECT_EQ(p.types[counter], "counter") << counter;
    ASSERT_EQ(samples_named(p, counter).size(), 1u) << counter;
    EXPECT_EQ(samples_named(p, counter)[0].value, 0) << counter;
  }

  bool found_invalid = false;
  static const std::regex snake_case("[a-z]+(_[a-z]+)*");
  for (const Sample& s : samples_named(p, "fencelock_acquire_errors_total")) {
    EXPECT_TRUE(std::regex_match(s.labels.at("code"), snake_case)) << s.labels.at("code");
    EXPECT_NE(s.labels.at("code"), "ok") << "ok is not an error";
    if (s.labels.at("code") == "invalid_argument") {
      found_invalid = true;
      EXPECT_EQ(s.value, 1);
    }
  }
  EXPECT_TRUE(found_invalid) << text;

  for (const char* name :
       {"fencelock_acquire_duration_seconds", "fencelock_wait_duration_seconds",
        "fencelock_release_duration_seconds", "fencelock_renew_round_duration_seconds"}) {
    const std::string family = name;
    EXPECT_EQ(p.types[family], "histogram") << family;
    auto buckets = samples_named(p, family + "_bucket");
    ASSERT_EQ(buckets.size(), LatencyHistogram::kBounds.size() + 1) << family;
    EXPECT_EQ(buckets.back().labels.at("le"), "+Inf") << family;
    double previous_le = 0;
    for (std::size_t i = 0; i + 1 < buckets.size(); ++i) {
      double le = std::strtod(buckets[i].labels.at("le").c_str(), nullptr);
      EXPECT_GT(le, previous_le) << family << ": le not ascending";
      EXPECT_DOUBLE_EQ(le, std::chrono::duration<double>(LatencyHistogram::kBounds[i]).count());
      previous_le = le;
      EXPECT_LE(buckets[i].value, buckets[i + 1].value) << family << ": not cumulative";
    }
    auto count = samples_named(p, family + "_count");
    auto sum = samples_named(p, family + "_sum");
    ASSERT_EQ(count.size(), 1u) << family;
    ASSERT_EQ(sum.size(), 1u) << family;
    EXPECT_EQ(buckets.back().value, count[0].value) << family << ": +Inf bucket != count";
  }
  EXPECT_EQ(samples_named(p, "fencelock_acquire_duration_seconds_count")[0].value, 4);
  EXPECT_EQ(samples_named(p, "fencelock_release_duration_seconds_count")[0].value, 3);
}

TEST(Prometheus, LabelValueIsEscaped) {
  const std::string label = "odd\"label\\with\nnewline";
  const std::string text = to_prometheus(MetricsSnapshot{}, label);
  EXPECT_NE(text.find(R"(fencelock_grants_total{backend="odd\"label\\with\nnewline"} 0)"),
            std::string::npos)
      << text;
  Parsed p = parse_exposition(text);
  EXPECT_TRUE(p.errors.empty()) << ::testing::PrintToString(p.errors);
  ASSERT_FALSE(p.samples.empty());
  EXPECT_EQ(p.samples[0].labels.at("backend"), label);
}

}  // namespace
}  // namespace fencelock
