#include "stats.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fencelock::bench {

Summary summarize(std::vector<double> samples) {
  Summary s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    auto index = static_cast<std::size_t>(std::ceil(q * static_cast<double>(samples.size()))) - 1;
    return samples[std::min(index, samples.size() - 1)];
  };
  s.mean_us =
      std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  s.p50_us = at(0.50);
  s.p99_us = at(0.99);
  s.p999_us = at(0.999);
  s.max_us = samples.back();
  for (int percent = 1; percent <= 99; ++percent) {
    s.cdf.emplace_back(percent / 100.0, at(percent / 100.0));
  }
  for (double q : {0.995, 0.999, 0.9999, 1.0}) s.cdf.emplace_back(q, at(q));
  return s;
}

double jain_fairness(const std::vector<double>& shares) {
  double sum = 0, squares = 0;
  for (double x : shares) {
    sum += x;
    squares += x * x;
  }
  if (squares == 0) return 0;
  return sum * sum / (static_cast<double>(shares.size()) * squares);
}

std::chrono::microseconds process_cpu_time() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto us = [](const timeval& tv) {
    return static_cast<long long>(tv.tv_sec) * 1'000'000 + tv.tv_usec;
  };
  return std::chrono::microseconds(us(usage.ru_utime) + us(usage.ru_stime));
}

}  // namespace fencelock::bench
