#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernelsmith/error.hpp"
#include "kernelsmith/curate/minhash.hpp"

namespace mh = kernelsmith::minhash;

namespace {

std::vector<std::uint64_t> range_set(std::uint64_t lo, std::uint64_t hi) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t x = lo; x < hi; ++x) v.push_back(x * 2654435761ULL + 17);
  std::sort(v.begin(), v.end());
  return v;
}

// A random "module" of `n` statements drawn from a vocabulary.
std::string random_module(std::mt19937_64& rng, int n) {
  static const char* ops[] = {"relu",       "gelu",       "conv2d", "linear",     "softmax",
                              "matmul",     "sigmoid",    "tanh",   "layer_norm", "dropout",
                              "max_pool2d", "avg_pool2d", "bmm",    "cat",        "exp"};
  std::string s = "class M(nn.Module):\n    def forward(self, x):\n";
  for (int i = 0; i < n; ++i) {
    s += "        v" + std::to_string(rng() % 50) + " = torch." + ops[rng() % 15] + "(v" +
         std::to_string(rng() % 50) + ", " + std::to_string(rng() % 1000) + ")\n";
  }
  return s + "        return x\n";
}

}  // namespace

TEST(MinHash, TokenizerIgnoresCommentsAndFormatting) {
  auto a = mh::tokenize("x = foo(a,b)  # comment\n");
  auto b = mh::tokenize("x=foo( a , b )\n");
  EXPECT_EQ(a, b);
  EXPECT_EQ(mh::tokenize("s = 'a # b' ** 2"), (std::vector<std::string>{"s", "=", "'a # b'", "**", "2"}));
  EXPECT_EQ(mh::tokenize("y = 1.5e-3"), (std::vector<std::string>{"y", "=", "1.5e-3"}));
  EXPECT_EQ(mh::shingle_hashes("a = 1 # x", 5), mh::shingle_hashes("a=1", 5));
  EXPECT_TRUE(mh::shingle_hashes("", 3).empty());
  EXPECT_EQ(mh::shingle_hashes("a b", 3).size(), 1u);
}

TEST(MinHash, EstimateIsCloseToTrueJaccard) {
  // |A ∩ B| = 600, |A ∪ B| = 1400 -> J = 3/7; and a disjoint and an identical pair.
  const auto a = range_set(0, 1000);
  const auto b = range_set(400, 1400);
  const double truth = mh::jaccard(a, b);
  EXPECT_NEAR(truth, 600.0 / 1400.0, 1e-12);
  mh::MinHasher h(512, 7);
  const double est = mh::estimate_jaccard(h.signature(a), h.signature(b));
  // std error sqrt(J(1-J)/512) ~ 0.022; allow 4 sigma
  EXPECT_NEAR(est, truth, 0.09);
  EXPECT_DOUBLE_EQ(mh::estimate_jaccard(h.signature(a), h.signature(a)), 1.0);
  EXPECT_LT(mh::estimate_jaccard(h.signature(range_set(0, 500)), h.signature(range_set(500, 1000))), 0.03);
  // several similarity levels, each estimate within tolerance
  for (std::uint64_t overlap : {100u, 500u, 900u}) {
    const auto x = range_set(0, 1000);
    const auto y = range_set(1000 - overlap, 2000 - overlap);
    EXPECT_NEAR(mh::estimate_jaccard(h.signature(x), h.signature(y)), mh::jaccard(x, y), 0.09) << overlap;
  }
}

TEST(MinHash, SignaturesAreDeterministicPerSeed) {
  const auto a = range_set(0, 100);
  EXPECT_EQ(mh::MinHasher(64, 3).signature(a), mh::MinHasher(64, 3).signature(a));
  EXPECT_NE(mh::MinHasher(64, 3).signature(a), mh::MinHasher(64, 4).signature(a));
}

TEST(MinHash, LshFindsNearDuplicatesAndNotUnrelated) {
  std::mt19937_64 rng(42);
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) docs.push_back(random_module(rng, 40));
  // near duplicates of docs 3 and 77: one changed line and a comment / renamed constant
  std::string near3 = docs[3];
  near3.replace(near3.find("torch."), 6, "torch.nn.functional.");
  near3 += "# trailing comment\n";
  std::string near77 = docs[77] + "        y = x + 1\n";
  docs.push_back(near3);   // id 200
  docs.push_back(near77);  // id 201
  mh::Params p;
  p.threshold = 0.7;
  mh::LSHIndex index(p);
  EXPECT_EQ(index.add_many(docs, 2), 0u);
  ASSERT_EQ(index.size(), docs.size());
  const auto pairs = index.near_duplicate_pairs();
  std::set<std::pair<std::size_t, std::size_t>> got(pairs.begin(), pairs.end());
  EXPECT_TRUE(got.count({3, 200}));
  EXPECT_TRUE(got.count({77, 201}));
  EXPECT_EQ(got.size(), 2u) << "unrelated random modules were paired";
  const auto groups = index.groups();
  EXPECT_EQ(groups[200], 3u);
  EXPECT_EQ(groups[201], 77u);
  EXPECT_EQ(groups[5], 5u);
  EXPECT_EQ(index.query(near3), (std::vector<std::size_t>{3, 200}));
  // single add gives the same signature as the batched path
  mh::LSHIndex single(p);
  single.add(docs[10]);
  EXPECT_EQ(single.signature(0), index.signature(10));
}

TEST(MinHash, BadParametersAreRejectedByName) {
  mh::Params p;
  p.bands = 30;  // does not divide 128
  try {
    mh::LSHIndex index(p);
    FAIL() << "expected InvalidArgument";
  } catch (const kernelsmith::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bands"), std::string::npos);
  }
  EXPECT_THROW(mh::shingle_hashes("x", 0), kernelsmith::InvalidArgument);
  mh::LSHIndex ok(mh::Params{});
  EXPECT_THROW(ok.signature(0), kernelsmith::InvalidArgument);
}
