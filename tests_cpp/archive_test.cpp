#include <gtest/gtest.h>

#include <memory>

#include "kernelsmith/engine/archive.hpp"
#include "kernelsmith/error.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace ks = kernelsmith;

namespace {
std::int64_t g_next_id = 0;

// A correct program with score `score` and metric "m" = m.
ks::ProgramPtr make(double score, double m, const std::string& tag = "") {
  auto p = std::make_shared<ks::Program>();
  p->id = g_next_id++;
  p->source = "x = " + std::to_string(p->id) + tag + "\n";
  p->metrics = {{"score", score}, {"m", m}};
  p->status = ks::Status::Correct;
  p->code_hash = ks::normalized_hash(p->source);
  return p;
}

std::vector<ks::FeatureDim> fixed_m(int bins) {
  ks::FeatureDim d;
  d.name = "m";
  d.bins = bins;
  d.fixed = true;
  d.lo = 0.0;
  d.hi = 10.0;
  return {d};
}

ks::ProgramPtr with_values(ks::ProgramPtr p, const std::vector<ks::FeatureDim>& dims) {
  for (const auto& d : dims) p->feature_values.push_back(ks::feature_value(d, *p));
  return p;
}
}  // namespace

TEST(Archive, CellKeepsTheFitterProgram) {
  auto dims = fixed_m(10);
  ks::IslandArchive a(0, dims, 100, 1, 4);
  auto low = with_values(make(1.0, 2.5), dims);
  auto high = with_values(make(2.0, 2.7), dims);  // same cell (bin 2)
  auto lower = with_values(make(0.5, 2.1), dims);
  EXPECT_TRUE(a.insert(low).owns_cell);
  EXPECT_TRUE(a.insert(high).owns_cell);
  EXPECT_FALSE(a.insert(lower).owns_cell);
  EXPECT_EQ(a.num_cells(), 1u);
  EXPECT_EQ(a.owner_of({2})->id, high->id);
  EXPECT_EQ(a.size(), 3u);  // the losers stay in the population
  EXPECT_EQ(high->features, std::vector<int>{2});
}

TEST(Archive, FixedBinsClampAndAdaptiveBinsRebinDeterministically) {
  auto dims = fixed_m(5);
  ks::IslandArchive fixed(0, dims, 100, 1, 4);
  auto over = with_values(make(1.0, 99.0), dims);
  auto under = with_values(make(1.0, -5.0), dims);
  fixed.insert(over);
  fixed.insert(under);
  EXPECT_EQ(over->features[0], 4);
  EXPECT_EQ(under->features[0], 0);

  ks::FeatureDim adaptive{"m", 4, false, 0.0, 0.0};
  auto build = [&] {
    ks::IslandArchive a(0, {adaptive}, 100, 1, 4);
    for (int i = 0; i < 20; ++i) a.insert(with_values(make(i % 7, (i * 37) % 19), {adaptive}));
    return a;
  };
  ks::IslandArchive a = build(), b = build();
  EXPECT_GT(a.rebins(), 0);
  EXPECT_EQ(a.dims()[0].lo <= 0.0, true);
  EXPECT_GE(a.dims()[0].hi, 18.0);
  auto ca = a.cells(), cb = b.cells();
  ASSERT_EQ(ca.size(), cb.size());
  for (std::size_t i = 0; i < ca.size(); ++i) {
    EXPECT_EQ(ca[i].first, cb[i].first);
    EXPECT_EQ(ca[i].second->score(), cb[i].second->score());
  }
  // Every owner is the fittest member of its cell after re-binning.
  for (const auto& m : a.members()) {
    auto owner = a.owner_of(m->features);
    ASSERT_TRUE(owner);
    EXPECT_GE(owner->score(), m->score());
  }
}

TEST(Archive, ElitesAndEvictionProtectOwnersAndBest) {
  auto dims = fixed_m(2);  // two cells: m < 5 and m >= 5
  ks::IslandArchive a(0, dims, 3, 1, 4);
  auto best = with_values(make(10.0, 1.0), dims);
  auto lonely = with_values(make(-5.0, 9.0), dims);  // worst, but owns cell 1
  a.insert(best);
  a.insert(lonely);
  std::vector<std::int64_t> evicted;
  for (int i = 0; i < 6; ++i) {
    auto r = a.insert(with_values(make(i, 2.0), dims));
    evicted.insert(evicted.end(), r.evicted.begin(), r.evicted.end());
  }
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(evicted.size(), 5u);
  EXPECT_TRUE(a.find(best->id));
  EXPECT_TRUE(a.find(lonely->id));
  EXPECT_EQ(a.best()->id, best->id);
  auto e = a.elites(2);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0]->id, best->id);
  EXPECT_DOUBLE_EQ(e[1]->score(), 5.0);
}

TEST(Archive, DuplicateCodeIsNotAddedAndFailuresAreBounded) {
  auto dims = fixed_m(2);
  ks::IslandArchive a(0, dims, 10, 1, 2);
  auto p = with_values(make(1.0, 1.0), dims);
  auto q = with_values(make(2.0, 1.0), dims);
  q->source = p->source + "   # same code\n";
  q->code_hash = ks::normalized_hash(q->source);
  EXPECT_TRUE(a.insert(p).inserted);
  EXPECT_FALSE(a.insert(q).inserted);
  for (int i = 0; i < 3; ++i) {
    auto f = make(0, 0);
    f->status = ks::Status::CompileFailed;
    const auto dropped = a.add_failure(f);
    EXPECT_EQ(dropped, i < 2 ? -1 : f->id - 2);
  }
  EXPECT_EQ(a.failures().size(), 2u);
  auto bad = make(0, 0);
  bad->status = ks::Status::Incorrect;
  EXPECT_THROW(a.insert(bad), ks::InvalidArgument);
}
