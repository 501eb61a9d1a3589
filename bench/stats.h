// Summary statistics for the benchmark: percentiles, Jain's fairness index, CPU time.
#pragma once

#include <chrono>
#include <utility>
#include <vector>

namespace fencelock::bench {

struct Summary {
  std::size_t count = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  // The distribution for CDF plots: (fraction of samples, latency at that quantile), at every
  // percent from 1 to 99, then 99.5, 99.9, 99.99 % and the maximum.
  std::vector<std::pair<double, double>> cdf;
};

Summary summarize(std::vector<double> samples_us);

// (sum x)^2 / (n * sum x^2): 1.0 when every worker got the same share.
double jain_fairness(const std::vector<double>& shares);

// User + system CPU time consumed by this process so far.
std::chrono::microseconds process_cpu_time();

}  // namespace fencelock::bench
