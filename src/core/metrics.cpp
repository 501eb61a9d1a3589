#include "core/metrics.h"

#include <algorithm>
#include <iterator>
#include <string>

#include <fmt/format.h>

namespace fencelock {
namespace detail {

using std::chrono::nanoseconds;

std::size_t Histogram::bucket_index(nanoseconds elapsed) noexcept {
  const auto& bounds = LatencyHistogram::kBounds;
  auto it = std::lower_bound(bounds.begin(), bounds.end(), elapsed,
                             [](std::chrono::microseconds bound, nanoseconds value) {
                               return nanoseconds(bound) < value;
                             });
  return static_cast<std::size_t>(it - bounds.begin());
}

void Histogram::observe(std::chrono::steady_clock::duration elapsed) noexcept {
  nanoseconds ns = std::max(std::chrono::duration_cast<nanoseconds>(elapsed), nanoseconds(0));
  buckets_[bucket_index(ns)].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
}

LatencyHistogram Histogram::snapshot() const noexcept {
  LatencyHistogram out;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    if (i < out.buckets.size()) out.buckets[i] = running;
  }
  out.count = running;
  out.sum = nanoseconds(static_cast<nanoseconds::rep>(sum_ns_.load(std::memory_order_relaxed)));
  return out;
}

void Metrics::record_acquire(Code code, bool waited, Duration elapsed, bool contended) noexcept {
  add(acquisitions_);
  if (code == Code::kOk && contended) add(contended_grants_);
  auto index = static_cast<std::size_t>(code);
  add(acquire_results_[index < kCodeCount ? index : static_cast<std::size_t>(Code::kInternal)]);
  if (code == Code::kLocked && waited) add(timeouts_);
  acquire_latency_.observe(elapsed);
  if (waited) wait_latency_.observe(elapsed);
}

void Metrics::record_release(Code code, Duration elapsed) noexcept {
  add(releases_);
  if (code != Code::kOk) add(release_failures_);
  if (code == Code::kUnavailable) add(release_unavailable_);
  release_latency_.observe(elapsed);
}

void Metrics::record_renew_round(Duration elapsed, std::uint64_t renewed,
                                 std::uint64_t failed) noexcept {
  add(renewals_, renewed);
  add(renewal_failures_, failed);
  renew_latency_.observe(elapsed);
}

void Metrics::record_loss() noexcept { add(losses_); }

MetricsSnapshot Metrics::snapshot() const noexcept {
  auto load = [](const std::atomic<std::uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  auto result = [&](Code code) { return load(acquire_results_[static_cast<std::size_t>(code)]); };
  MetricsSnapshot s;
  s.acquisitions = load(acquisitions_);
  s.grants = result(Code::kOk);
  s.contended = result(Code::kLocked);
  s.timeouts = load(timeouts_);
  s.contended_grants = load(contended_grants_);
  s.cancellations = result(Code::kCancelled);
  s.quorum_failures = result(Code::kUnavailable) + load(release_unavailable_);
  for (std::size_t i = 1; i < kCodeCount; ++i) s.acquire_errors[i] = load(acquire_results_[i]);
  s.releases = load(releases_);
  s.release_failures = load(release_failures_);
  s.losses = load(losses_);
  s.renewals = load(renewals_);
  s.renewal_failures = load(renewal_failures_);
  s.acquire_latency = acquire_latency_.snapshot();
  s.wait_latency = wait_latency_.snapshot();
  s.release_latency = release_latency_.snapshot();
  s.renew_latency = renew_latency_.snapshot();
  return s;
}

std::string escape_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace detail

namespace {

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// Writes one metric family: its HELP and TYPE lines, then its samples.
class Exposition {
 public:
  explicit Exposition(std::string_view client_label)
      : label_(fmt::format("backend=\"{}\"", detail::escape_label(client_label))) {}

  void counter(std::string_view name, std::string_view help, std::uint64_t value) {
    header(name, help, "counter");
    fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name, label_, value);
  }

  // One sample per failure code, code="locked", "deadline_exceeded", ... (code_name() in
  // snake_case, as Prometheus label values usually are).
  void acquire_errors(const MetricsSnapshot& s) {
    constexpr std::string_view name = "fencelock_acquire_errors_total";
    header(name, "Acquisitions that failed, by status code.", "counter");
    for (std::size_t i = 1; i < kCodeCount; ++i) {
      std::string code(code_name(static_cast<Code>(i)));
      std::replace(code.begin(), code.end(), ' ', '_');
      fmt::format_to(std::back_inserter(out_), "{}{{{},code=\"{}\"}} {}\n", name, label_, code,
                     s.acquire_errors[i]);
    }
  }

  void histogram(std::string_view name, std::string_view help, const LatencyHistogram& h) {
    header(name, help, "histogram");
    auto out = std::back_inserter(out_);
    for (std::size_t i = 0; i < h.buckets.size(); ++i) {
      fmt::format_to(out, "{}_bucket{{{},le=\"{}\"}} {}\n", name, label_,
                     seconds(LatencyHistogram::kBounds[i]), h.buckets[i]);
    }
    fmt::format_to(out, "{}_bucket{{{},le=\"+Inf\"}} {}\n", name, label_, h.count);
    fmt::format_to(out, "{}_sum{{{}}} {}\n", name, label_, seconds(h.sum));
    fmt::format_to(out, "{}_count{{{}}} {}\n", name, label_, h.count);
  }

  std::string take() { return std::move(out_); }

 private:
  void header(std::string_view name, std::string_view help, std::string_view type) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }

  std::string label_;
  std::string out_;
};

}  // namespace

std::string to_prometheus(const MetricsSnapshot& s, std::string_view client_label) {
  Exposition e(client_label);
  e.counter("fencelock_acquisitions_total", "Lock acquisitions, whatever their outcome.",
            s.acquisitions);
  e.counter("fencelock_grants_total", "Acquisitions that returned a lease.", s.grants);
  e.counter("fencelock_contended_total",
            "Acquisitions that found the lock held for their whole wait (kLocked).", s.contended);
  e.counter("fencelock_timeouts_total", "Acquisitions whose wait for a held lock ran out.",
            s.timeouts);
  e.counter("fencelock_contended_grants_total",
            "Acquisitions granted after finding the lock held (they waited for a release).",
            s.contended_grants);
  e.counter("fencelock_cancellations_total", "Acquisitions cancelled by their stop token.",
            s.cancellations);
  e.counter("fencelock_quorum_failures_total",
            "Acquisitions and releases that found no quorum (kUnavailable).", s.quorum_failures);
  e.acquire_errors(s);
  e.counter("fencelock_releases_total", "Releases sent to the servers.", s.releases);
  e.counter("fencelock_release_failures_total",
            "Releases that failed (the lock expires by its TTL).", s.release_failures);
  e.counter("fencelock_losses_total",
            "Leases lost before their release (renewal rejected or validity ran out).", s.losses);
  e.counter("fencelock_reconnects_total",
            "Server connections reopened after a failure (counted once per recovery).",
            s.reconnects);
  e.counter("fencelock_renewals_total", "Lease renewals the backend confirmed.", s.renewals);
  e.counter("fencelock_renewal_failures_total", "Lease renewals rejected or not confirmed in time.",
            s.renewal_failures);
  e.histogram("fencelock_acquire_duration_seconds", "Duration of lock acquisitions.",
              s.acquire_latency);
  e.histogram("fencelock_wait_duration_seconds",
              "Duration of acquisitions allowed to wait for a held lock (wait > 0).",
              s.wait_latency);
  e.histogram("fencelock_release_duration_seconds", "Duration of releases.", s.release_latency);
  e.histogram("fencelock_renew_round_duration_seconds",
              "Duration of renewal rounds (one batched backend call each).", s.renew_latency);
  return e.take();
}

}  // namespace fencelock
