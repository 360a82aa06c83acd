#include "kernelsmith/timing/compare.hpp"

#include <cmath>

#include "kernelsmith/error.hpp"

namespace kernelsmith::timing {

namespace {
constexpr std::size_t kMinPairsForTukey = 8;
}  // namespace

std::string to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::kFaster: return "faster";
    case Verdict::kSlower: return "slower";
    case Verdict::kIndistinguishable: return "indistinguishable";
  }
  return "unknown";
}

void CompareOptions::validate() const {
  KS_REQUIRE(target_rel_half_width > 0.0, "target_rel_half_width must be > 0, got " << target_rel_half_width);
  KS_REQUIRE(confidence > 0.0 && confidence < 1.0, "confidence must be in (0, 1), got " << confidence);
  KS_REQUIRE(min_pairs >= 1, "min_pairs must be >= 1, got " << min_pairs);
  KS_REQUIRE(max_pairs >= min_pairs,
             "max_pairs must be >= min_pairs (" << min_pairs << "), got " << max_pairs);
  KS_REQUIRE(time_budget_s > 0.0, "time_budget_s must be > 0 (inf for none), got " << time_budget_s);
  KS_REQUIRE(tukey_k > 0.0, "tukey_k must be > 0, got " << tukey_k);
  KS_REQUIRE(method == "pair_ratio" || method == "bootstrap",
             "method must be 'pair_ratio' or 'bootstrap', got '" << method << "'");
  KS_REQUIRE(bootstrap_resamples >= 100, "bootstrap_resamples must be >= 100, got " << bootstrap_resamples);
  KS_REQUIRE(max_batch >= 1, "max_batch must be >= 1, got " << max_batch);
}

Verdict verdict_for(const Interval& speedup) {
  if (speedup.lower > 1.0) return Verdict::kFaster;
  if (speedup.upper < 1.0) return Verdict::kSlower;
  return Verdict::kIndistinguishable;
}

ComparisonResult compare_pairs(const Samples& reference, const Samples& candidate,
                               const CompareOptions& options) {
  options.validate();
  KS_REQUIRE(!reference.empty(), "compare_pairs: needs at least one pair, got none");
  KS_REQUIRE(reference.size() == candidate.size(),
             "compare_pairs: reference and candidate need the same number of samples, got "
                 << reference.size() << " and " << candidate.size());
  // Outliers are judged on the log ratio: symmetric for faster and slower,
  // and a pair where one side was disturbed stands out there.
  Samples log_ratio;
  log_ratio.reserve(reference.size());
  for (std::size_t i = 0; i < reference.size(); ++i) {
    KS_REQUIRE(reference[i] > 0.0 && candidate[i] > 0.0 && std::isfinite(reference[i]) &&
                   std::isfinite(candidate[i]),
               "compare_pairs: samples must be finite and > 0, pair " << i << " is (" << reference[i] << ", "
                                                                      << candidate[i] << ")");
    log_ratio.push_back(std::log(reference[i] / candidate[i]));
  }
  Samples ref_kept, cand_kept, ratio_kept, log_ratio_kept;
  ComparisonResult r;
  double lo = -INFINITY, hi = INFINITY;
  if (options.reject_outliers && reference.size() >= kMinPairsForTukey) {
    const TukeyResult t = reject_outliers_tukey(log_ratio, options.tukey_k);
    lo = t.lower_fence;
    hi = t.upper_fence;
    r.n_outlier_pairs = t.rejected.size();
  }
  for (std::size_t i = 0; i < reference.size(); ++i) {
    if (log_ratio[i] < lo || log_ratio[i] > hi) continue;
    ref_kept.push_back(reference[i]);
    cand_kept.push_back(candidate[i]);
    ratio_kept.push_back(reference[i] / candidate[i]);
    log_ratio_kept.push_back(log_ratio[i]);
  }
  r.n_pairs = ratio_kept.size();
  if (options.method == "pair_ratio") {
    r.speedup = median_ci_order_statistics(ratio_kept, options.confidence);
  } else {
    r.speedup = bootstrap_ratio_of_medians_ci(ref_kept, cand_kept, options.confidence,
                                              options.bootstrap_resamples, options.seed,
                                              /*paired=*/true);
  }
  r.verdict = verdict_for(r.speedup);
  r.reference_median = median_ci_order_statistics(ref_kept, options.confidence);
  r.candidate_median = median_ci_order_statistics(cand_kept, options.confidence);
  const LinearTrend trend = linear_trend(log_ratio_kept);
  r.ratio_drift = std::expm1(trend.slope * static_cast<double>(log_ratio_kept.size() - 1));
  return r;
}

PairedComparator::PairedComparator(CompareOptions options, Clock clock)
    : options_(std::move(options)), clock_(clock ? std::move(clock) : steady_clock_seconds()) {
  options_.validate();
  start_s_ = clock_();
}

void PairedComparator::add_pair(double reference, double candidate) {
  KS_REQUIRE(std::isfinite(reference) && reference > 0.0 && std::isfinite(candidate) && candidate > 0.0,
             "samples must be finite and > 0, got (" << reference << ", " << candidate << ")");
  reference_.push_back(reference);
  candidate_.push_back(candidate);
}

void PairedComparator::add(const Samples& reference, const Samples& candidate) {
  KS_REQUIRE(reference.size() == candidate.size(),
             "PairedComparator::add: reference and candidate need the same length, got "
                 << reference.size() << " and " << candidate.size());
  for (std::size_t i = 0; i < reference.size(); ++i) add_pair(reference[i], candidate[i]);
}

double PairedComparator::elapsed_s() const { return clock_() - start_s_; }

bool PairedComparator::need_more() {
  const std::size_t n = reference_.size();
  if (n >= options_.min_pairs) {
    const ComparisonResult r = compare_pairs(reference_, candidate_, options_);
    last_rel_half_width_ = r.speedup.relative_half_width();
    if (last_rel_half_width_ <= options_.target_rel_half_width) {
      stop_reason_ = StopReason::kTargetReached;
      return false;
    }
    if (options_.stop_when_decided && r.verdict != Verdict::kIndistinguishable) {
      stop_reason_ = StopReason::kDecided;
      return false;
    }
  }
  stop_reason_ = limit_reached(n, options_.max_pairs, elapsed_s(), options_.time_budget_s);
  return stop_reason_ == StopReason::kNotStopped;
}

std::size_t PairedComparator::suggested_batch() const {
  return suggest_batch(reference_.size(), last_rel_half_width_, options_.target_rel_half_width,
                       options_.min_pairs, options_.max_pairs, options_.max_batch);
}

ComparisonResult PairedComparator::result() const {
  KS_REQUIRE(!reference_.empty(), "PairedComparator::result: no pairs were added");
  ComparisonResult r = compare_pairs(reference_, candidate_, options_);
  r.stop_reason = stop_reason_;
  r.elapsed_s = elapsed_s();
  return r;
}

}  // namespace kernelsmith::timing
