// Paired comparison of a reference and a candidate: the caller measures them
// alternately (A B, then B A, ...) so slow drift (clocks, temperature,
// neighbours) hits both alike, and hands over pairs of adjacent samples.
// The speedup is reference time / candidate time, with a CI; the verdict is
// "faster" or "slower" only when that CI excludes 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "kernelsmith/timing/sampler.hpp"
#include "kernelsmith/timing/stats.hpp"

namespace kernelsmith::timing {

enum class Verdict { kFaster, kSlower, kIndistinguishable };
std::string to_string(Verdict verdict);

struct CompareOptions {
  double target_rel_half_width = 0.005;  // on the speedup
  double confidence = 0.95;
  std::size_t min_pairs = 10;
  std::size_t max_pairs = 5000;
  double time_budget_s = std::numeric_limits<double>::infinity();
  // Stop as soon as the CI excludes 1 (after min_pairs) instead of waiting
  // for the target width: cheaper when only the verdict matters.
  bool stop_when_decided = false;
  // Pairs whose log ratio lies outside Tukey's fences are dropped (one side
  // of the pair was hit by an interrupt or a clock change).
  bool reject_outliers = true;
  double tukey_k = 1.5;
  // "pair_ratio": median of per-pair ratios with an order-statistic CI
  // (default; cheap enough to re-evaluate after every batch).
  // "bootstrap": ratio of medians with a percentile bootstrap over pairs.
  std::string method = "pair_ratio";
  int bootstrap_resamples = 1000;
  std::uint64_t seed = 0;
  std::size_t max_batch = 1000;

  void validate() const;
};

struct ComparisonResult {
  Interval speedup;  // reference / candidate
  Verdict verdict = Verdict::kIndistinguishable;
  StopReason stop_reason = StopReason::kNotStopped;
  std::size_t n_pairs = 0;  // after outlier rejection
  std::size_t n_outlier_pairs = 0;
  Interval reference_median;  // times, same unit as the samples
  Interval candidate_median;
  // Drift of the speedup over the run: exp of the least-squares change of
  // log(reference / candidate) from the first kept pair to the last, minus 1
  // (0.1: the ratio rose 10% while measuring). Alternation cancels drift that
  // hits both sides alike; this is what it could not cancel.
  double ratio_drift = 0.0;
  double elapsed_s = 0.0;
};

// Verdict from a speedup interval: decided only when 1 lies outside it.
Verdict verdict_for(const Interval& speedup);

// One-shot analysis of already measured pairs (no stopping rule).
ComparisonResult compare_pairs(const Samples& reference, const Samples& candidate,
                               const CompareOptions& options = {});

class PairedComparator {
 public:
  explicit PairedComparator(CompareOptions options = {}, Clock clock = {});

  void add_pair(double reference, double candidate);
  void add(const Samples& reference, const Samples& candidate);

  bool need_more();
  std::size_t suggested_batch() const;  // in pairs
  // Measure the reference first in pair i? Alternates so that neither side
  // always enjoys the position after the other (A B, B A, A B, ...).
  static bool reference_first(std::size_t pair_index) { return pair_index % 2 == 0; }

  StopReason stop_reason() const { return stop_reason_; }
  const Samples& reference_samples() const { return reference_; }
  const Samples& candidate_samples() const { return candidate_; }
  double elapsed_s() const;
  ComparisonResult result() const;

 private:
  CompareOptions options_;
  Clock clock_;
  double start_s_;
  Samples reference_;
  Samples candidate_;
  StopReason stop_reason_ = StopReason::kNotStopped;
  double last_rel_half_width_ = std::numeric_limits<double>::infinity();
};

}  // namespace kernelsmith::timing
