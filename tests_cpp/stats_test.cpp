#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernelsmith/error.hpp"
#include "kernelsmith/timing/stats.hpp"
#include "timing_synthetic.hpp"

namespace ks = kernelsmith;
using namespace kernelsmith::timing;

TEST(Stats, HandComputedValues) {
  const Samples x{1, 2, 3, 4, 100};
  EXPECT_DOUBLE_EQ(mean(x), 22.0);
  EXPECT_DOUBLE_EQ(median(x), 3.0);
  // |x - 3| = {2, 1, 0, 1, 97} -> median 1.
  EXPECT_DOUBLE_EQ(mad(x), 1.0);
  // Squared deviations from 22 sum to 7610; / (n - 1) = 1902.5.
  EXPECT_NEAR(stddev(x), std::sqrt(1902.5), 1e-12);
  EXPECT_NEAR(cv(x), std::sqrt(1902.5) / 22.0, 1e-12);
  EXPECT_DOUBLE_EQ(min(x), 1.0);
  EXPECT_DOUBLE_EQ(max(x), 100.0);
  // trim 0.2 of 5 drops one from each end: {2, 3, 4}.
  EXPECT_DOUBLE_EQ(trimmed_mean(x, 0.2), 3.0);
  EXPECT_DOUBLE_EQ(trimmed_mean(Samples{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.1), 5.5);
  EXPECT_DOUBLE_EQ(median(Samples{4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(quantile(Samples{1, 2, 3, 4}, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile(Samples{1, 2, 3, 4}, 1.0), 4.0);
  // Textbook example: mean 5, sum of squares 32 -> sample sd sqrt(32 / 7).
  EXPECT_NEAR(cv(Samples{2, 4, 4, 4, 5, 5, 7, 9}), std::sqrt(32.0 / 7.0) / 5.0, 1e-12);
  EXPECT_DOUBLE_EQ(stddev(Samples{7}), 0.0);
}

TEST(Stats, InputIsNotMutated) {
  const Samples x{5, 1, 4, 2, 3};
  const Samples copy = x;
  (void)median(x);
  (void)mad(x);
  (void)quantile(x, 0.3);
  EXPECT_EQ(x, copy);
}

TEST(Stats, BadArgumentsThrowInvalidArgument) {
  EXPECT_THROW(median(Samples{}), ks::InvalidArgument);
  EXPECT_THROW(quantile(Samples{1}, 1.5), ks::InvalidArgument);
  EXPECT_THROW(trimmed_mean(Samples{1}, 0.5), ks::InvalidArgument);
  EXPECT_THROW(cv(Samples{-1, 1}), ks::InvalidArgument);
  EXPECT_THROW(bootstrap_median_ci(Samples{1, 2}, 1.0), ks::InvalidArgument);
  EXPECT_THROW(bootstrap_median_ci(Samples{1, 2}, 0.95, 10), ks::InvalidArgument);
  EXPECT_THROW(bootstrap_ratio_of_medians_ci(Samples{1, 2}, Samples{1}, 0.95, 200, 0, true),
               ks::InvalidArgument);
}

TEST(Stats, TukeyFencesByHand) {
  // Q1 = 2, Q3 = 4, IQR = 2 -> fences [-1, 7]: only 100 goes.
  const TukeyResult t = reject_outliers_tukey(Samples{1, 2, 3, 4, 100});
  EXPECT_DOUBLE_EQ(t.lower_fence, -1.0);
  EXPECT_DOUBLE_EQ(t.upper_fence, 7.0);
  ASSERT_EQ(t.rejected.size(), 1u);
  EXPECT_EQ(t.rejected[0], 4u);
  EXPECT_EQ(t.kept, (Samples{1, 2, 3, 4}));
}

TEST(Stats, RegistryByName) {
  const auto names = statistic_names();
  for (const char* expected : {"mean", "median", "trimmed_mean", "stddev", "cv", "mad"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  EXPECT_DOUBLE_EQ(compute_statistic("median", Samples{3, 1, 2}), 2.0);
  try {
    compute_statistic("mode", Samples{1});
    FAIL() << "unknown statistic accepted";
  } catch (const ks::InvalidArgument& e) {
    EXPECT_NE(e.message().find("median"), std::string::npos) << "message lists known names";
  }
}

TEST(Stats, OrderStatisticIntervalByHand) {
  // Binomial(10, 1/2): P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024,
  // so the 95% interval is [x_(2), x_(9)].
  const Interval i = median_ci_order_statistics(Samples{10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_DOUBLE_EQ(i.estimate, 5.5);
  EXPECT_DOUBLE_EQ(i.lower, 2.0);
  EXPECT_DOUBLE_EQ(i.upper, 9.0);
  // n = 5: P(B <= 0) = 1/32 > 0.025 -> nothing narrower than [min, max].
  const Interval j = median_ci_order_statistics(Samples{1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(j.lower, 1.0);
  EXPECT_DOUBLE_EQ(j.upper, 5.0);
  EXPECT_NEAR(i.relative_half_width(), 3.5 / 5.5, 1e-12);
}

TEST(Stats, MedianIntervalsCoverTheTrueMedian) {
  // 400 data sets of 51 normal samples: a 95% interval must cover the true
  // median about 95% of the time (binomial sd of the rate is ~1.1%).
  synthetic::Normal normal(42);
  int covered_order = 0, covered_boot = 0;
  const int trials = 400;
  for (int t = 0; t < trials; ++t) {
    Samples x;
    for (int i = 0; i < 51; ++i) x.push_back(normal(100.0, 2.0));
    covered_order += median_ci_order_statistics(x).contains(100.0);
    covered_boot += bootstrap_median_ci(x, 0.95, 400, static_cast<std::uint64_t>(t)).contains(100.0);
  }
  EXPECT_GE(covered_order, static_cast<int>(0.92 * trials));
  EXPECT_LE(covered_order, static_cast<int>(0.99 * trials));
  EXPECT_GE(covered_boot, static_cast<int>(0.90 * trials));
  EXPECT_LE(covered_boot, static_cast<int>(0.99 * trials));
}

TEST(Stats, BootstrapIsReproducibleForASeed) {
  synthetic::Normal normal(7);
  Samples x;
  for (int i = 0; i < 64; ++i) x.push_back(normal(10.0, 1.0));
  const Interval a = bootstrap_median_ci(x, 0.95, 1000, 123);
  const Interval b = bootstrap_median_ci(x, 0.95, 1000, 123);
  EXPECT_EQ(a.lower, b.lower);
  EXPECT_EQ(a.upper, b.upper);
  EXPECT_DOUBLE_EQ(a.estimate, median(x));
  EXPECT_LT(a.lower, a.estimate);
  EXPECT_GT(a.upper, a.estimate);
  EXPECT_GE(a.lower, min(x));
  EXPECT_LE(a.upper, max(x));
}

TEST(Stats, RatioOfMediansBootstrap) {
  // Constant sides give a degenerate interval at the exact ratio.
  const Interval c = bootstrap_ratio_of_medians_ci(Samples(20, 3.0), Samples(20, 1.5));
  EXPECT_DOUBLE_EQ(c.estimate, 2.0);
  EXPECT_DOUBLE_EQ(c.lower, 2.0);
  EXPECT_DOUBLE_EQ(c.upper, 2.0);
  // Shared drift: pair i of both sides carries the same factor. Pairing keeps
  // the interval tight around the true ratio 1.05; unpaired resampling sees
  // the drift as noise and is much wider.
  synthetic::Normal normal(3);
  Samples num, den;
  for (int i = 0; i < 200; ++i) {
    const double drift = 1.0 + 0.3 * i / 200.0;
    den.push_back(drift * normal(1.0, 0.002));
    num.push_back(drift * normal(1.05, 0.002));
  }
  const Interval paired = bootstrap_ratio_of_medians_ci(num, den, 0.95, 1000, 1, true);
  const Interval unpaired = bootstrap_ratio_of_medians_ci(num, den, 0.95, 1000, 1, false);
  EXPECT_TRUE(paired.contains(1.05)) << paired.lower << " " << paired.upper;
  EXPECT_LT(paired.upper - paired.lower, 0.5 * (unpaired.upper - unpaired.lower));
}

TEST(Stats, OutliersDoNotMoveTheMedian) {
  synthetic::Normal normal(11);
  Samples clean;
  for (int i = 0; i < 500; ++i) clean.push_back(normal(50.0, 0.5));
  Samples dirty = clean;
  for (std::size_t i = 0; i < dirty.size(); i += 20) dirty[i] *= 10.0;  // 5% huge outliers
  EXPECT_NEAR(median(dirty), median(clean), 0.005 * median(clean));
  const TukeyResult t = reject_outliers_tukey(dirty);
  EXPECT_GE(t.rejected.size(), 25u);
  EXPECT_NEAR(median(t.kept), 50.0, 0.005 * 50.0);
  // The mean is dragged far off, which is why the harness reports the median.
  EXPECT_GT(mean(dirty), 1.3 * mean(clean));
}

TEST(Stats, LinearTrendFitsALineByLeastSquares) {
  Samples line;
  for (int i = 0; i < 10; ++i) line.push_back(3.0 + 0.5 * i);
  const LinearTrend t = linear_trend(line);
  EXPECT_NEAR(t.intercept, 3.0, 1e-12);
  EXPECT_NEAR(t.slope, 0.5, 1e-12);
  EXPECT_NEAR(t.r2, 1.0, 1e-12);
  EXPECT_NEAR(t.relative_change, 0.5 * 9 / 5.25, 1e-12);  // across the run / the mean level
  const LinearTrend flat = linear_trend(Samples(50, 7.0));
  EXPECT_NEAR(flat.slope, 0.0, 1e-12);
  EXPECT_EQ(flat.r2, 0.0);
  EXPECT_NEAR(flat.intercept, 7.0, 1e-12);
  EXPECT_EQ(linear_trend(Samples{4.0}).intercept, 4.0);
  EXPECT_THROW(linear_trend(Samples{}), ks::InvalidArgument);
}

TEST(Stats, LinearTrendFindsDriftTheMedianHides) {
  // 2000 noisy timings whose level rises 10% over the run (a warming clock):
  // the fit recovers the drift; without it the same noise shows none.
  synthetic::Normal normal(5);
  Samples drifting, steady;
  for (int i = 0; i < 2000; ++i) {
    const double noise = normal(0.0, 0.02);
    drifting.push_back(100.0 * (1.0 + 0.10 * i / 1999.0) * (1.0 + noise));
    steady.push_back(100.0 * (1.0 + noise));
  }
  EXPECT_NEAR(linear_trend(drifting).relative_change, 0.10 / 1.05, 0.01);
  EXPECT_NEAR(linear_trend(steady).relative_change, 0.0, 0.01);
  EXPECT_DOUBLE_EQ(compute_statistic("drift", drifting), linear_trend(drifting).relative_change);
}
