// Statistics over timing samples: small pure functions plus a named registry
// (in the spirit of google/benchmark's statistics.cc), and confidence
// intervals for a median and for a ratio of medians.
//
// Every function takes its samples by const reference and never mutates them;
// empty input is an InvalidArgument (a statistic of nothing is a caller bug).
// Bootstrap resampling uses our own seeded generator (SplitMix64), not
// <random>'s distributions, whose output differs between standard libraries:
// a given seed gives the same interval on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kernelsmith::timing {

using Samples = std::vector<double>;

double mean(const Samples& x);
double median(const Samples& x);
// Quantile with linear interpolation between order statistics (R type 7,
// numpy's default): q in [0, 1].
double quantile(const Samples& x, double q);
// Mean after dropping floor(trim * n) samples from each end; trim in [0, 0.5).
double trimmed_mean(const Samples& x, double trim = 0.1);
// Sample standard deviation (n - 1 in the denominator); 0 for one sample.
double stddev(const Samples& x);
// Coefficient of variation: stddev / mean.
double cv(const Samples& x);
// Median absolute deviation from the median, unscaled (multiply by 1.4826 to
// estimate a normal sigma).
double mad(const Samples& x);
double min(const Samples& x);
double max(const Samples& x);

// Tukey's fences: samples outside [Q1 - k IQR, Q3 + k IQR] are outliers.
struct TukeyResult {
  Samples kept;                       // in input order
  std::vector<std::size_t> rejected;  // indices into the input
  double lower_fence = 0.0;
  double upper_fence = 0.0;
};
TukeyResult reject_outliers_tukey(const Samples& x, double k = 1.5);

// Least-squares line through the samples in the order they were taken,
// y_i ~ intercept + slope * i (i = 0..n-1): slow drift of a machine (clocks,
// temperature, a neighbour starting up) shows as a slope that the median
// hides. relative_change = slope * (n - 1) / |mean of the fit|, the drift
// across the whole run as a fraction of the level (0 when n < 2).
struct LinearTrend {
  double intercept = 0.0;
  double slope = 0.0;
  double r2 = 0.0;  // share of the variance the line explains
  double relative_change = 0.0;
};
LinearTrend linear_trend(const Samples& y);

// A point estimate with a two-sided confidence interval.
struct Interval {
  double estimate = 0.0;
  double lower = 0.0;
  double upper = 0.0;
  double confidence = 0.95;
  // (upper - lower) / 2 / |estimate|; infinity when the estimate is 0.
  double relative_half_width() const;
  bool contains(double value) const { return lower <= value && value <= upper; }
};

// Distribution-free CI for the median from order statistics (binomial(n, 1/2)
// bounds, exact for n <= 1000, normal approximation above). Cheap and
// deterministic: what the adaptive sampler uses after every batch. Needs at
// least 6 samples for a 95% interval; fewer give the full [min, max] range.
Interval median_ci_order_statistics(const Samples& x, double confidence = 0.95);

// Percentile bootstrap CI for the median.
Interval bootstrap_median_ci(const Samples& x, double confidence = 0.95, int resamples = 2000,
                             std::uint64_t seed = 0);

// Percentile bootstrap CI for median(numerator) / median(denominator).
// paired = true resamples pair indices (both vectors must have the same
// length; pair i was measured adjacently), which keeps the drift that a pair
// shares out of the ratio; paired = false resamples each side independently.
Interval bootstrap_ratio_of_medians_ci(const Samples& numerator, const Samples& denominator,
                                       double confidence = 0.95, int resamples = 2000, std::uint64_t seed = 0,
                                       bool paired = true);

// Named registry of scalar statistics: "mean", "median", "trimmed_mean",
// "stddev", "cv", "mad", "min", "max", "p05", "p25", "p75", "p95".
using StatisticFn = double (*)(const Samples&);
std::vector<std::string> statistic_names();
StatisticFn find_statistic(const std::string& name);  // InvalidArgument when unknown
double compute_statistic(const std::string& name, const Samples& x);

// SplitMix64: tiny, fast, and identical everywhere for a given seed.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform integer in [0, bound) without modulo bias (rejection).
  std::uint64_t below(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

}  // namespace kernelsmith::timing
