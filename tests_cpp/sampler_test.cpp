#include <gtest/gtest.h>

#include <cmath>

#include "kernelsmith/error.hpp"
#include "kernelsmith/timing/sampler.hpp"
#include "timing_synthetic.hpp"

namespace ks = kernelsmith;
using namespace kernelsmith::timing;

namespace {
// A simulated clock: each read advances by `step` seconds.
Clock fake_clock(double step) {
  auto now = std::make_shared<double>(0.0);
  return [now, step] { return *now += step; };
}

SamplerResult drive(AdaptiveSampler& sampler, synthetic::Normal& normal, double mean, double sigma,
                    double outlier_every = 0) {
  std::size_t taken = 0;
  while (sampler.need_more()) {
    const std::size_t batch = sampler.suggested_batch();
    EXPECT_GE(batch, 1u);
    for (std::size_t i = 0; i < batch; ++i, ++taken) {
      double s = std::fabs(normal(mean, sigma));  // times are >= 0
      if (outlier_every > 0 && taken % static_cast<std::size_t>(outlier_every) == 0) s *= 5.0;
      sampler.add(s);
    }
  }
  return sampler.result();
}
}  // namespace

TEST(Sampler, StopsAtTheTargetOnKnownNoise) {
  // 3% normal noise: the 95% CI half-width of a median is about
  // 1.96 * 1.2533 * 0.03 / sqrt(n), so 0.5% needs roughly n = 220.
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    synthetic::Normal normal(seed);
    SamplerOptions o;
    o.max_samples = 5000;
    AdaptiveSampler sampler(o, fake_clock(0.0));
    const SamplerResult r = drive(sampler, normal, 10.0, 0.3);
    EXPECT_EQ(r.stop_reason, StopReason::kTargetReached);
    EXPECT_LE(r.summary.median.relative_half_width(), 0.005);
    EXPECT_GE(r.n_total, 120u);
    EXPECT_LE(r.n_total, 600u) << "overshoot: the batch estimate is too greedy";
    EXPECT_NEAR(r.summary.median.estimate, 10.0, 0.01 * 10.0);
    EXPECT_TRUE(r.summary.median.contains(10.0) || std::fabs(r.summary.median.estimate - 10.0) < 0.01);
  }
}

TEST(Sampler, QuietSourceStopsAtMinSamples) {
  synthetic::Normal normal(5);
  SamplerOptions o;
  o.min_samples = 12;
  AdaptiveSampler sampler(o, fake_clock(0.0));
  EXPECT_EQ(sampler.suggested_batch(), 12u);
  const SamplerResult r = drive(sampler, normal, 1.0, 1e-5);
  EXPECT_EQ(r.stop_reason, StopReason::kTargetReached);
  EXPECT_EQ(r.n_total, 12u);
}

TEST(Sampler, SampleCapStopsANoisySource) {
  synthetic::Normal normal(9);
  SamplerOptions o;
  o.max_samples = 200;
  AdaptiveSampler sampler(o, fake_clock(0.0));
  const SamplerResult r = drive(sampler, normal, 1.0, 0.5);
  EXPECT_EQ(r.stop_reason, StopReason::kMaxSamples);
  EXPECT_EQ(r.n_total, 200u);
}

TEST(Sampler, TimeBudgetStopsIt) {
  synthetic::Normal normal(9);
  SamplerOptions o;
  o.time_budget_s = 5.0;
  AdaptiveSampler sampler(o, fake_clock(1.0));  // every clock read is one second later
  const SamplerResult r = drive(sampler, normal, 1.0, 0.5);
  EXPECT_EQ(r.stop_reason, StopReason::kTimeBudget);
  EXPECT_LT(r.n_total, 10000u);
  EXPECT_EQ(to_string(r.stop_reason), "time_budget");
}

TEST(Sampler, InjectedOutliersDoNotMoveTheEstimate) {
  synthetic::Normal clean_normal(21), dirty_normal(21);
  SamplerOptions o;
  o.max_samples = 400;
  o.min_samples = 400;  // same sample count for both runs
  AdaptiveSampler clean(o, fake_clock(0.0)), dirty(o, fake_clock(0.0));
  const SamplerResult a = drive(clean, clean_normal, 20.0, 0.2);
  const SamplerResult b = drive(dirty, dirty_normal, 20.0, 0.2, /*outlier_every=*/10);
  EXPECT_GE(b.summary.n_outliers, 35u);
  EXPECT_NEAR(b.summary.median.estimate, a.summary.median.estimate, 0.003 * 20.0);
  EXPECT_NEAR(b.summary.median.estimate, 20.0, 0.005 * 20.0);
}

TEST(Sampler, BootstrapMethodAlsoReachesTheTarget) {
  synthetic::Normal normal(4);
  SamplerOptions o;
  o.ci_method = "bootstrap";
  o.bootstrap_resamples = 300;
  AdaptiveSampler sampler(o, fake_clock(0.0));
  const SamplerResult r = drive(sampler, normal, 10.0, 0.2);
  EXPECT_EQ(r.stop_reason, StopReason::kTargetReached);
  EXPECT_LE(r.summary.median.relative_half_width(), 0.005);
}

TEST(Sampler, BadOptionsAndSamplesAreRejected) {
  SamplerOptions o;
  o.ci_method = "jackknife";
  EXPECT_THROW(AdaptiveSampler{o}, ks::InvalidArgument);
  o = SamplerOptions{};
  o.max_samples = 3;
  o.min_samples = 5;
  EXPECT_THROW(AdaptiveSampler{o}, ks::InvalidArgument);
  AdaptiveSampler s;
  EXPECT_THROW(s.add(-1.0), ks::InvalidArgument);
  EXPECT_THROW(s.add(std::nan("")), ks::InvalidArgument);
  EXPECT_THROW(s.result(), ks::InvalidArgument);
}

TEST(Sampler, SuggestedBatchFollowsTheWidth) {
  // At n = 400 and 1.2x the target width, about 0.58 n more are needed.
  EXPECT_NEAR(static_cast<double>(suggest_batch(400, 0.006, 0.005, 10, 100000, 100000)), 234.0, 1.0);
  // Twice the width would need 3 n more, but a step at most doubles n.
  EXPECT_EQ(suggest_batch(100, 0.01, 0.005, 10, 100000, 100000), 100u);
  EXPECT_EQ(suggest_batch(100, 0.01, 0.005, 10, 150, 100000), 50u);   // capped by max_n
  EXPECT_EQ(suggest_batch(3, INFINITY, 0.005, 10, 1000, 1000), 7u);   // up to min_n first
  EXPECT_EQ(suggest_batch(80, 0.00501, 0.005, 10, 1000, 1000), 10u);  // at least n / 8
}
