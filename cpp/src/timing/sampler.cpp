#include "kernelsmith/timing/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernelsmith/error.hpp"

namespace kernelsmith::timing {

namespace {
// Quartiles from fewer samples are too coarse for Tukey's fences to mean
// anything; below this count every sample is kept.
constexpr std::size_t kMinSamplesForTukey = 8;

void require_ci_method(const std::string& method) {
  KS_REQUIRE(method == "order" || method == "bootstrap",
             "ci_method must be 'order' or 'bootstrap', got '" << method << "'");
}
}  // namespace

std::string to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kNotStopped: return "not_stopped";
    case StopReason::kTargetReached: return "target_reached";
    case StopReason::kMaxSamples: return "max_samples";
    case StopReason::kTimeBudget: return "time_budget";
    case StopReason::kDecided: return "decided";
  }
  return "unknown";
}

Clock steady_clock_seconds() {
  return [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
}

void SamplerOptions::validate() const {
  KS_REQUIRE(target_rel_half_width > 0.0, "target_rel_half_width must be > 0, got " << target_rel_half_width);
  KS_REQUIRE(confidence > 0.0 && confidence < 1.0, "confidence must be in (0, 1), got " << confidence);
  KS_REQUIRE(min_samples >= 1, "min_samples must be >= 1, got " << min_samples);
  KS_REQUIRE(max_samples >= min_samples,
             "max_samples must be >= min_samples (" << min_samples << "), got " << max_samples);
  KS_REQUIRE(time_budget_s > 0.0, "time_budget_s must be > 0 (inf for none), got " << time_budget_s);
  KS_REQUIRE(tukey_k > 0.0, "tukey_k must be > 0, got " << tukey_k);
  require_ci_method(ci_method);
  KS_REQUIRE(bootstrap_resamples >= 100, "bootstrap_resamples must be >= 100, got " << bootstrap_resamples);
  KS_REQUIRE(max_batch >= 1, "max_batch must be >= 1, got " << max_batch);
}

SampleSummary summarize(const Samples& x, const SamplerOptions& options) {
  KS_REQUIRE(!x.empty(), "summarize: needs at least one sample, got none");
  require_ci_method(options.ci_method);
  SampleSummary s;
  Samples kept;
  if (options.reject_outliers && x.size() >= kMinSamplesForTukey) {
    TukeyResult t = reject_outliers_tukey(x, options.tukey_k);
    s.n_outliers = t.rejected.size();
    kept = std::move(t.kept);
  } else {
    kept = x;
  }
  s.n = kept.size();
  s.median = options.ci_method == "order"
                 ? median_ci_order_statistics(kept, options.confidence)
                 : bootstrap_median_ci(kept, options.confidence, options.bootstrap_resamples, options.seed);
  s.mean = mean(kept);
  s.stddev = stddev(kept);
  s.cv = s.mean != 0.0 ? s.stddev / std::fabs(s.mean) : 0.0;
  s.mad = mad(kept);
  s.min = min(kept);
  s.max = max(kept);
  return s;
}

StopReason limit_reached(std::size_t n, std::size_t max_samples, double elapsed_s, double budget_s) {
  if (n >= max_samples) return StopReason::kMaxSamples;
  if (elapsed_s >= budget_s) return StopReason::kTimeBudget;
  return StopReason::kNotStopped;
}

std::size_t suggest_batch(std::size_t n, double rel_half_width, double target, std::size_t min_n,
                          std::size_t max_n, std::size_t max_batch) {
  if (n >= max_n) return 0;
  const std::size_t room = max_n - n;
  std::size_t want;
  if (n < min_n) {
    want = min_n - n;
  } else if (!std::isfinite(rel_half_width)) {
    want = std::max<std::size_t>(n, 1);
  } else {
    // The half-width shrinks like 1/sqrt(n): n_needed = n (w / target)^2,
    // with 10% headroom; never less than an eighth of what we have, so a
    // stubborn tail does not degrade into one-sample batches.
    const double ratio = rel_half_width / target;
    const double needed = std::ceil(static_cast<double>(n) * ratio * ratio * 1.1);
    const double extra = needed - static_cast<double>(n);
    want = extra > 0 ? static_cast<std::size_t>(std::min(extra, 1e12)) : 1;
    want = std::max<std::size_t>(want, std::max<std::size_t>(n / 8, 1));
    // At most double per step: the first widths come from few samples and
    // overstate the noise, which would otherwise overshoot the target badly.
    want = std::min(want, n);
  }
  return std::min({want, room, max_batch});
}

AdaptiveSampler::AdaptiveSampler(SamplerOptions options, Clock clock)
    : options_(std::move(options)), clock_(clock ? std::move(clock) : steady_clock_seconds()) {
  options_.validate();
  start_s_ = clock_();
}

void AdaptiveSampler::add(double sample) {
  KS_REQUIRE(std::isfinite(sample) && sample >= 0.0, "samples must be finite and >= 0, got " << sample);
  samples_.push_back(sample);
}

void AdaptiveSampler::add(const Samples& samples) {
  for (double s : samples) add(s);
}

double AdaptiveSampler::elapsed_s() const { return clock_() - start_s_; }

bool AdaptiveSampler::need_more() {
  const std::size_t n = samples_.size();
  if (n >= options_.min_samples) {
    last_rel_half_width_ = summarize(samples_, options_).median.relative_half_width();
    if (last_rel_half_width_ <= options_.target_rel_half_width) {
      stop_reason_ = StopReason::kTargetReached;
      return false;
    }
  }
  stop_reason_ = limit_reached(n, options_.max_samples, elapsed_s(), options_.time_budget_s);
  return stop_reason_ == StopReason::kNotStopped;
}

std::size_t AdaptiveSampler::suggested_batch() const {
  return suggest_batch(samples_.size(), last_rel_half_width_, options_.target_rel_half_width,
                       options_.min_samples, options_.max_samples, options_.max_batch);
}

SamplerResult AdaptiveSampler::result() const {
  KS_REQUIRE(!samples_.empty(), "AdaptiveSampler::result: no samples were added");
  SamplerResult r;
  r.summary = summarize(samples_, options_);
  r.stop_reason = stop_reason_;
  r.n_total = samples_.size();
  r.elapsed_s = elapsed_s();
  return r;
}

}  // namespace kernelsmith::timing
