#include <gtest/gtest.h>

#include "kernelsmith/timing/compare.hpp"
#include "kernelsmith/error.hpp"
#include "timing_synthetic.hpp"

namespace ks = kernelsmith;
using namespace kernelsmith::timing;

namespace {
Clock frozen_clock() {
  return [] { return 0.0; };
}

// Reference time ref_mean, candidate ref_mean / speedup, both with relative
// noise `sigma` and a slow shared drift (clocks warming up): +25% over 2000 pairs.
ComparisonResult run(double speedup, double sigma, std::uint64_t seed, CompareOptions o = CompareOptions{}) {
  synthetic::Normal normal(seed);
  PairedComparator c(o, frozen_clock());
  std::size_t i = 0;
  while (c.need_more()) {
    const std::size_t batch = c.suggested_batch();
    for (std::size_t b = 0; b < batch; ++b, ++i) {
      const double drift = 1.0 + 0.25 * static_cast<double>(i) / 2000.0;
      const double ref = drift * 100.0 * (1.0 + normal(0.0, sigma));
      const double cand = drift * (100.0 / speedup) * (1.0 + normal(0.0, sigma));
      c.add_pair(ref, cand);
    }
  }
  return c.result();
}
}  // namespace

TEST(Compare, TwoPercentFasterIsCalledFaster) {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    const ComparisonResult r = run(1.02, 0.01, seed);
    EXPECT_EQ(r.verdict, Verdict::kFaster) << "seed " << seed;
    EXPECT_EQ(r.stop_reason, StopReason::kTargetReached);
    EXPECT_NEAR(r.speedup.estimate, 1.02, 0.01);  // within two half-widths
    EXPECT_GT(r.speedup.lower, 1.0);
    EXPECT_LE(r.speedup.relative_half_width(), 0.005);
  }
}

TEST(Compare, TwoPercentSlowerIsCalledSlower) {
  for (std::uint64_t seed : {5u, 6u}) {
    const ComparisonResult r = run(1.0 / 1.02, 0.01, seed);
    EXPECT_EQ(r.verdict, Verdict::kSlower);
    EXPECT_NEAR(r.speedup.estimate, 1.0 / 1.02, 0.01);
    EXPECT_EQ(to_string(r.verdict), "slower");
  }
}

TEST(Compare, IdenticalSourcesAreIndistinguishable) {
  // A 95% interval excludes the truth about once in 20 runs; with 20 seeds
  // allow at most 3 false calls. Every estimate lies within about two
  // half-widths (1%) of 1.
  int decided = 0;
  for (std::uint64_t seed = 100; seed < 120; ++seed) {
    const ComparisonResult r = run(1.0, 0.01, seed);
    decided += r.verdict != Verdict::kIndistinguishable;
    EXPECT_NEAR(r.speedup.estimate, 1.0, 0.01) << "seed " << seed;
    EXPECT_LE(r.speedup.relative_half_width(), 0.005);
  }
  EXPECT_LE(decided, 3);
}

TEST(Compare, BootstrapMethodAgrees) {
  CompareOptions o;
  o.method = "bootstrap";
  o.bootstrap_resamples = 300;
  const ComparisonResult r = run(1.02, 0.01, 8, o);
  EXPECT_EQ(r.verdict, Verdict::kFaster);
  EXPECT_NEAR(r.speedup.estimate, 1.02, 0.006);
}

TEST(Compare, StopWhenDecidedIsCheaper) {
  CompareOptions o;
  o.stop_when_decided = true;
  const ComparisonResult early = run(1.10, 0.01, 9, o);
  const ComparisonResult full = run(1.10, 0.01, 9);
  EXPECT_EQ(early.verdict, Verdict::kFaster);
  EXPECT_EQ(early.stop_reason, StopReason::kDecided);
  EXPECT_LE(early.n_pairs, full.n_pairs);
}

TEST(Compare, DisturbedPairsAreDropped) {
  synthetic::Normal normal(12);
  Samples ref, cand;
  for (int i = 0; i < 300; ++i) {
    ref.push_back(100.0 * (1.0 + normal(0.0, 0.005)));
    cand.push_back(98.0 * (1.0 + normal(0.0, 0.005)));
    if (i % 25 == 0) cand.back() *= 4.0;  // an interrupt hit the candidate
  }
  const ComparisonResult r = compare_pairs(ref, cand);
  EXPECT_GE(r.n_outlier_pairs, 12u);
  EXPECT_NEAR(r.speedup.estimate, 100.0 / 98.0, 0.003);
  EXPECT_EQ(r.verdict, Verdict::kFaster);
}

TEST(Compare, VerdictNeedsTheIntervalToExcludeOne) {
  Interval i;
  i.estimate = 1.01;
  i.lower = 0.999;
  i.upper = 1.02;
  EXPECT_EQ(verdict_for(i), Verdict::kIndistinguishable);
  i.lower = 1.001;
  EXPECT_EQ(verdict_for(i), Verdict::kFaster);
  i.estimate = 0.98;
  i.lower = 0.97;
  i.upper = 0.99;
  EXPECT_EQ(verdict_for(i), Verdict::kSlower);
}

TEST(Compare, AlternatesWhoGoesFirst) {
  EXPECT_TRUE(PairedComparator::reference_first(0));
  EXPECT_FALSE(PairedComparator::reference_first(1));
  EXPECT_TRUE(PairedComparator::reference_first(2));
}

TEST(Compare, BadInputIsRejected) {
  EXPECT_THROW(compare_pairs(Samples{1, 2}, Samples{1}), ks::InvalidArgument);
  EXPECT_THROW(compare_pairs(Samples{1}, Samples{0}), ks::InvalidArgument);
  CompareOptions o;
  o.method = "mean";
  EXPECT_THROW(PairedComparator{o}, ks::InvalidArgument);
  PairedComparator c;
  EXPECT_THROW(c.add(Samples{1, 2}, Samples{1}), ks::InvalidArgument);
  EXPECT_THROW(c.result(), ks::InvalidArgument);
}

TEST(Compare, RatioDriftIsWhatAlternationCouldNotCancel) {
  // The shared drift of run() hits both sides alike: the ratio does not drift.
  EXPECT_NEAR(run(1.0, 0.01, 3).ratio_drift, 0.0, 0.02);
  // A candidate that slows down 20% over the run (it heats up, a cache it
  // relies on fills): the ratio falls by 1/1.2 from the first pair to the last.
  synthetic::Normal normal(9);
  Samples ref, cand;
  for (int i = 0; i < 1000; ++i) {
    ref.push_back(100.0 * (1.0 + normal(0.0, 0.01)));
    cand.push_back(50.0 * (1.0 + 0.2 * i / 999.0) * (1.0 + normal(0.0, 0.01)));
  }
  const ComparisonResult r = compare_pairs(ref, cand);
  EXPECT_NEAR(r.ratio_drift, 1.0 / 1.2 - 1.0, 0.02);
  EXPECT_EQ(r.verdict, Verdict::kFaster);
}
