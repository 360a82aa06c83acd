#include "kernelsmith/timing/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include <Eigen/Dense>

#include "kernelsmith/error.hpp"

namespace kernelsmith::timing {

namespace {

void require_nonempty(const Samples& x, const char* what) {
  KS_REQUIRE(!x.empty(), what << ": needs at least one sample, got none");
}

void require_confidence(double confidence) {
  KS_REQUIRE(confidence > 0.0 && confidence < 1.0, "confidence must be in (0, 1), got " << confidence);
}

// Median of a scratch vector that may be reordered.
double median_inplace(Samples& v) {
  const std::size_t n = v.size();
  const std::size_t mid = n / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

double quantile_sorted(const Samples& sorted, double q) {
  const std::size_t n = sorted.size();
  if (n == 1) return sorted[0];
  const double pos = q * static_cast<double>(n - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, n - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

Interval percentile_interval(Samples& boot, double estimate, double confidence) {
  std::sort(boot.begin(), boot.end());
  const double alpha = 1.0 - confidence;
  Interval out;
  out.estimate = estimate;
  out.lower = quantile_sorted(boot, alpha / 2.0);
  out.upper = quantile_sorted(boot, 1.0 - alpha / 2.0);
  out.confidence = confidence;
  return out;
}

void require_resamples(int resamples) {
  KS_REQUIRE(resamples >= 100 && resamples <= 1000000,
             "resamples must be in [100, 1000000], got " << resamples);
}

double p05(const Samples& x) { return quantile(x, 0.05); }
double p25(const Samples& x) { return quantile(x, 0.25); }
double p75(const Samples& x) { return quantile(x, 0.75); }
double p95(const Samples& x) { return quantile(x, 0.95); }
double trimmed_mean_default(const Samples& x) { return trimmed_mean(x, 0.1); }
double drift(const Samples& x) { return linear_trend(x).relative_change; }

const std::map<std::string, StatisticFn>& registry() {
  static const std::map<std::string, StatisticFn> table = {
      {"mean", &mean},     {"median", &median}, {"trimmed_mean", &trimmed_mean_default},
      {"stddev", &stddev}, {"cv", &cv},         {"mad", &mad},
      {"min", &min},       {"max", &max},       {"p05", &p05},
      {"p25", &p25},       {"p75", &p75},       {"p95", &p95},
      {"drift", &drift},
  };
  return table;
}

}  // namespace

LinearTrend linear_trend(const Samples& y) {
  KS_REQUIRE(!y.empty(), "linear_trend: needs at least one sample, got none");
  const auto n = static_cast<Eigen::Index>(y.size());
  LinearTrend out;
  if (n < 2) {
    out.intercept = y[0];
    return out;
  }
  // Design matrix [1, i] with the index centred, so the two columns are
  // orthogonal and the fit stays well conditioned for long runs; solved by
  // a column-pivoting QR (rank-revealing: a constant column cannot break it).
  const double centre = static_cast<double>(n - 1) / 2.0;
  Eigen::MatrixXd design(n, 2);
  design.col(0).setOnes();
  design.col(1) = Eigen::VectorXd::LinSpaced(n, -centre, centre);
  const Eigen::Map<const Eigen::VectorXd> values(y.data(), n);
  const Eigen::Vector2d coef = design.colPivHouseholderQr().solve(values);
  out.slope = coef(1);
  out.intercept = coef(0) - coef(1) * centre;
  const Eigen::VectorXd residual = values - design * coef;
  const double total = (values.array() - values.mean()).square().sum();
  out.r2 = total > 0.0 ? 1.0 - residual.squaredNorm() / total : 0.0;
  // coef(0) is the fitted value at the centre: the mean level of the run.
  out.relative_change = coef(0) != 0.0 ? out.slope * static_cast<double>(n - 1) / std::abs(coef(0)) : 0.0;
  return out;
}

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound) {
  // Reject the top partial block so every residue is equally likely.
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % bound;
  std::uint64_t r;
  do {
    r = next();
  } while (r >= limit);
  return r % bound;
}

double mean(const Samples& x) {
  require_nonempty(x, "mean");
  // Pairwise-free but compensated: timing samples are few and similar, a
  // plain sum loses nothing that matters, Kahan keeps it exact-ish anyway.
  double sum = 0.0, c = 0.0;
  for (double v : x) {
    const double y = v - c;
    const double t = sum + y;
    c = (t - sum) - y;
    sum = t;
  }
  return sum / static_cast<double>(x.size());
}

double median(const Samples& x) {
  require_nonempty(x, "median");
  Samples scratch(x);
  return median_inplace(scratch);
}

double quantile(const Samples& x, double q) {
  require_nonempty(x, "quantile");
  KS_REQUIRE(q >= 0.0 && q <= 1.0, "quantile: q must be in [0, 1], got " << q);
  Samples sorted(x);
  std::sort(sorted.begin(), sorted.end());
  return quantile_sorted(sorted, q);
}

double trimmed_mean(const Samples& x, double trim) {
  require_nonempty(x, "trimmed_mean");
  KS_REQUIRE(trim >= 0.0 && trim < 0.5, "trimmed_mean: trim must be in [0, 0.5), got " << trim);
  Samples sorted(x);
  std::sort(sorted.begin(), sorted.end());
  const auto cut = static_cast<std::size_t>(std::floor(trim * static_cast<double>(sorted.size())));
  const Samples middle(sorted.begin() + static_cast<std::ptrdiff_t>(cut),
                       sorted.end() - static_cast<std::ptrdiff_t>(cut));
  return mean(middle);
}

double stddev(const Samples& x) {
  require_nonempty(x, "stddev");
  if (x.size() < 2) return 0.0;
  const double m = mean(x);
  double ss = 0.0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

double cv(const Samples& x) {
  const double m = mean(x);
  KS_REQUIRE(m != 0.0, "cv: the mean is 0, the coefficient of variation is undefined");
  return stddev(x) / std::fabs(m);
}

double mad(const Samples& x) {
  const double med = median(x);
  Samples dev;
  dev.reserve(x.size());
  for (double v : x) dev.push_back(std::fabs(v - med));
  return median_inplace(dev);
}

double min(const Samples& x) {
  require_nonempty(x, "min");
  return *std::min_element(x.begin(), x.end());
}

double max(const Samples& x) {
  require_nonempty(x, "max");
  return *std::max_element(x.begin(), x.end());
}

TukeyResult reject_outliers_tukey(const Samples& x, double k) {
  require_nonempty(x, "reject_outliers_tukey");
  KS_REQUIRE(k > 0.0, "reject_outliers_tukey: k must be > 0, got " << k);
  Samples sorted(x);
  std::sort(sorted.begin(), sorted.end());
  const double q1 = quantile_sorted(sorted, 0.25);
  const double q3 = quantile_sorted(sorted, 0.75);
  const double iqr = q3 - q1;
  TukeyResult out;
  out.lower_fence = q1 - k * iqr;
  out.upper_fence = q3 + k * iqr;
  out.kept.reserve(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < out.lower_fence || x[i] > out.upper_fence) {
      out.rejected.push_back(i);
    } else {
      out.kept.push_back(x[i]);
    }
  }
  return out;
}

double Interval::relative_half_width() const {
  if (estimate == 0.0) return std::numeric_limits<double>::infinity();
  return (upper - lower) / 2.0 / std::fabs(estimate);
}

Interval median_ci_order_statistics(const Samples& x, double confidence) {
  require_nonempty(x, "median_ci_order_statistics");
  require_confidence(confidence);
  Samples sorted(x);
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double alpha = 1.0 - confidence;
  // The number B of samples below the true median is Binomial(n, 1/2);
  // [x_(j), x_(n-j+1)] (1-based) covers it with probability
  // 1 - 2 P(B <= j - 1). Take the largest j whose tail fits in alpha / 2.
  const double log_half_n = static_cast<double>(n) * std::log(0.5);
  const double log_n_fact = std::lgamma(static_cast<double>(n) + 1.0);
  double cdf = 0.0;
  std::size_t j = 0;  // 0: no order statistic is narrow enough -> [min, max]
  for (std::size_t i = 0; i < n / 2 + 1; ++i) {
    const double di = static_cast<double>(i);
    cdf += std::exp(log_n_fact - std::lgamma(di + 1.0) - std::lgamma(static_cast<double>(n) - di + 1.0) +
                    log_half_n);
    // cdf == P(B <= i); using x_(i+1) as the lower bound is valid when it fits.
    if (cdf <= alpha / 2.0) {
      j = i + 1;
    } else {
      break;
    }
  }
  Interval out;
  out.estimate = quantile_sorted(sorted, 0.5);
  out.confidence = confidence;
  if (j == 0) {
    out.lower = sorted.front();
    out.upper = sorted.back();
  } else {
    out.lower = sorted[j - 1];
    out.upper = sorted[n - j];
  }
  return out;
}

Interval bootstrap_median_ci(const Samples& x, double confidence, int resamples, std::uint64_t seed) {
  require_nonempty(x, "bootstrap_median_ci");
  require_confidence(confidence);
  require_resamples(resamples);
  SplitMix64 rng(seed);
  const std::size_t n = x.size();
  Samples scratch(n);
  Samples boot;
  boot.reserve(static_cast<std::size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (std::size_t i = 0; i < n; ++i) scratch[i] = x[rng.below(n)];
    boot.push_back(median_inplace(scratch));
  }
  return percentile_interval(boot, median(x), confidence);
}

Interval bootstrap_ratio_of_medians_ci(const Samples& numerator, const Samples& denominator,
                                       double confidence, int resamples, std::uint64_t seed, bool paired) {
  require_nonempty(numerator, "bootstrap_ratio_of_medians_ci (numerator)");
  require_nonempty(denominator, "bootstrap_ratio_of_medians_ci (denominator)");
  require_confidence(confidence);
  require_resamples(resamples);
  if (paired) {
    KS_REQUIRE(numerator.size() == denominator.size(),
               "bootstrap_ratio_of_medians_ci: paired=true needs equal lengths, got "
                   << numerator.size() << " and " << denominator.size());
  }
  const double den_median = median(denominator);
  KS_REQUIRE(den_median != 0.0, "bootstrap_ratio_of_medians_ci: the denominator's median is 0");
  SplitMix64 rng(seed);
  const std::size_t nn = numerator.size();
  const std::size_t nd = denominator.size();
  Samples num_scratch(nn), den_scratch(nd);
  Samples boot;
  boot.reserve(static_cast<std::size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    if (paired) {
      for (std::size_t i = 0; i < nn; ++i) {
        const std::size_t k = rng.below(nn);
        num_scratch[i] = numerator[k];
        den_scratch[i] = denominator[k];
      }
    } else {
      for (std::size_t i = 0; i < nn; ++i) num_scratch[i] = numerator[rng.below(nn)];
      for (std::size_t i = 0; i < nd; ++i) den_scratch[i] = denominator[rng.below(nd)];
    }
    const double d = median_inplace(den_scratch);
    boot.push_back(d == 0.0 ? std::numeric_limits<double>::infinity() : median_inplace(num_scratch) / d);
  }
  return percentile_interval(boot, median(numerator) / den_median, confidence);
}

std::vector<std::string> statistic_names() {
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

StatisticFn find_statistic(const std::string& name) {
  const auto& table = registry();
  const auto it = table.find(name);
  if (it == table.end()) {
    std::string allowed;
    for (const auto& kv : table) allowed += (allowed.empty() ? "" : ", ") + kv.first;
    KS_THROW(InvalidArgument, "unknown statistic '" << name << "'; known: " << allowed);
  }
  return it->second;
}

double compute_statistic(const std::string& name, const Samples& x) { return find_statistic(name)(x); }

}  // namespace kernelsmith::timing
