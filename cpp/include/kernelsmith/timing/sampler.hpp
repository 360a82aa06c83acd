// Adaptive sampling: keep taking timing samples until the confidence interval
// of the median is tight enough, a sample cap is hit, or a time budget runs
// out, and say which of these stopped it.
//
// The sampler never calls back into the measuring code: the caller (Python,
// or the OpenCL runtime) asks need_more() and suggested_batch(), measures a
// batch itself, and hands the samples over with add(). That keeps callbacks
// out of the hot loop and lets a GPU caller measure a whole batch between two
// device synchronizations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "kernelsmith/timing/stats.hpp"

namespace kernelsmith::timing {

enum class StopReason {
  kNotStopped,     // need_more() is still true
  kTargetReached,  // relative CI half-width <= target
  kMaxSamples,     // sample (or pair) cap reached first
  kTimeBudget,     // wall-clock budget spent first
  kDecided,        // comparator only: the CI excludes 1 and stop_when_decided is set
};
std::string to_string(StopReason reason);

// Seconds on a monotonic clock; injectable so tests can simulate time.
using Clock = std::function<double()>;
Clock steady_clock_seconds();

// How a CI for a median is computed: "order" (order statistics, distribution
// free, cheap: the default) or "bootstrap" (percentile bootstrap, seeded).
struct SamplerOptions {
  double target_rel_half_width = 0.005;  // 0.5% of the median
  double confidence = 0.95;
  std::size_t min_samples = 10;
  std::size_t max_samples = 10000;
  double time_budget_s = std::numeric_limits<double>::infinity();
  bool reject_outliers = true;  // Tukey fences before estimating
  double tukey_k = 1.5;
  std::string ci_method = "order";
  int bootstrap_resamples = 1000;
  std::uint64_t seed = 0;
  std::size_t max_batch = 1000;  // cap on suggested_batch()

  void validate() const;  // InvalidArgument naming the bad field
};

struct SampleSummary {
  std::size_t n = 0;           // samples after outlier rejection
  std::size_t n_outliers = 0;  // rejected by Tukey's fences
  Interval median;             // median with its CI
  double mean = 0.0;
  double stddev = 0.0;
  double cv = 0.0;
  double mad = 0.0;
  double min = 0.0;
  double max = 0.0;
};
// Summary of samples under the sampler's rules (outlier rejection, CI method).
SampleSummary summarize(const Samples& x, const SamplerOptions& options);

struct SamplerResult {
  SampleSummary summary;
  StopReason stop_reason = StopReason::kNotStopped;
  std::size_t n_total = 0;  // samples added, outliers included
  double elapsed_s = 0.0;
};

class AdaptiveSampler {
 public:
  explicit AdaptiveSampler(SamplerOptions options = {}, Clock clock = {});

  void add(double sample);
  void add(const Samples& samples);

  // True while more samples are wanted; once false, stop_reason() says why.
  bool need_more();
  // How many samples to take next: enough to reach min_samples, then an
  // estimate from the current width (width shrinks like 1/sqrt(n)),
  // at most doubling the sample count per step.
  std::size_t suggested_batch() const;

  StopReason stop_reason() const { return stop_reason_; }
  const Samples& samples() const { return samples_; }
  double elapsed_s() const;
  SamplerResult result() const;
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  Clock clock_;
  double start_s_;
  Samples samples_;
  StopReason stop_reason_ = StopReason::kNotStopped;
  double last_rel_half_width_ = std::numeric_limits<double>::infinity();
};

// Shared by the sampler and the comparator: next batch size from the current
// relative half-width, the target and the counts.
// The limits both drivers (sampler, comparator) check once their precision
// target is not met: the sample cap, then the time budget. kNotStopped means
// take more samples.
StopReason limit_reached(std::size_t n, std::size_t max_samples, double elapsed_s, double budget_s);

std::size_t suggest_batch(std::size_t n, double rel_half_width, double target, std::size_t min_n,
                          std::size_t max_n, std::size_t max_batch);

}  // namespace kernelsmith::timing
