#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "kernelsmith/engine/engine.hpp"
#include "kernelsmith/error.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace ks = kernelsmith;
namespace fs = std::filesystem;

namespace {

ks::EngineConfig config_from(const std::string& text) {
  return ks::EngineConfig::from_json(nlohmann::json::parse(text));
}

ks::Program seed_program(double score = 0.0) {
  ks::Program p;
  p.source = "def f(x):\n    return x\n";
  p.metrics = {{"score", score}};
  p.status = ks::Status::Correct;
  return p;
}

// A deterministic stand-in for proposer + evaluator: derives a child from the
// request alone (no wall clock, no threads).
ks::Program child_of(const ks::Request& r) {
  ks::Program c;
  const std::int64_t v = r.id * 7919 % 1000;
  c.source = "def f(x):\n    return x * " + std::to_string(v) + " + " + std::to_string(r.parent.id) + "\n" +
             std::string(static_cast<std::size_t>(v % 5), 'y') + " = 1\n";
  if (v % 10 == 0) {
    c.status = ks::Status::CompileFailed;
    c.feedback = {{"error", "SyntaxError at line 2"}};
  } else {
    c.status = ks::Status::Correct;
    c.metrics = {{"score", static_cast<double>(v) / 10.0}};
  }
  return c;
}

std::string describe(const ks::Request& r) {
  std::string s = std::to_string(r.id) + "/" + std::to_string(r.island) + "/" + r.mode + "/" +
                  std::to_string(r.parent.id) + "/" + std::to_string(r.iteration) + ":";
  for (const auto& p : r.inspirations) s += std::to_string(p.id) + ",";
  return s;
}

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ks_engine_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

const char* kSmallConfig = R"({"num_islands": 3, "migration_interval": 10, "population_size": 40,
  "recent_failures": 4, "repair_ratio": 0.2})";

}  // namespace

TEST(EngineConfig, RejectsBadValuesNamingKeyAndAllowed) {
  auto message = [](const std::string& text) {
    try {
      config_from(text);
    } catch (const ks::InvalidArgument& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"num_islands": 0})").find("'num_islands' must be >= 1"), std::string::npos);
  EXPECT_NE(message(R"({"feature_bins": -3})").find("'feature_bins' must be >= 1"), std::string::npos);
  EXPECT_NE(message(R"({"feature_bins": {"score": 0}})").find("feature_bins.score"), std::string::npos);
  const auto unknown_feature = message(R"({"feature_dimensions": ["speed"]})");
  EXPECT_NE(unknown_feature.find("unknown feature 'speed'; allowed: complexity, score"), std::string::npos);
  EXPECT_EQ(message(R"({"feature_dimensions": ["speed"], "metrics": ["speed"]})"), "no error");
  const auto unknown_key = message(R"({"num_island": 2})");
  EXPECT_NE(unknown_key.find("unknown config key 'num_island'; allowed keys: num_islands"),
            std::string::npos);
  EXPECT_NE(message(R"({"migration_topology": "star"})").find("ring, all"), std::string::npos);
  EXPECT_NE(message(R"({"exploration_ratio": 1.5})").find("'exploration_ratio' must be in [0, 1]"),
            std::string::npos);
  // Round trip.
  auto c = config_from(R"({"num_islands": 2, "feature_ranges": {"score": [0, 5]}, "target_score": 3})");
  auto again = ks::EngineConfig::from_json(c.to_json());
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(Engine, SeedAskTellAndBest) {
  ks::Engine e(config_from(kSmallConfig), 1);
  EXPECT_THROW(e.ask(), ks::Error);
  ks::Program pending = seed_program();
  pending.status = ks::Status::Pending;
  EXPECT_THROW(e.add_seed(pending), ks::InvalidArgument);
  auto ids = e.add_seed(seed_program(1.0));
  EXPECT_EQ(ids.size(), 3u);  // island -1: one copy per island
  auto r = e.ask();
  EXPECT_EQ(r.iteration, 1);
  EXPECT_EQ(r.parent.island, r.island);
  ks::Program c = child_of(r);
  c.status = ks::Status::Correct;
  c.metrics = {{"score", 5.0}};
  auto result = e.tell(c, r.id);
  EXPECT_TRUE(result.inserted);
  EXPECT_TRUE(result.new_best);
  EXPECT_EQ(e.best()->id, result.id);
  EXPECT_EQ(e.best()->parent_id, r.parent.id);
  EXPECT_EQ(e.best()->iteration, 1);
  EXPECT_THROW(e.tell(c, r.id), ks::InvalidArgument);  // request already closed
  EXPECT_EQ(e.stats().in_flight, 0);
}

TEST(Engine, SeenIgnoresCommentsAndWhitespace) {
  ks::Engine e(config_from(kSmallConfig), 1);
  e.add_seed(seed_program());
  EXPECT_TRUE(e.seen("# a comment\ndef f(x):   \n\n    return   x\n"));
  EXPECT_FALSE(e.seen("def f(x):\n    return x + 1\n"));
  e.mark_seen("def f(x):\n    return x + 1\n");
  EXPECT_TRUE(e.seen("def f(x):\n    return x + 1  # now seen\n"));
}

TEST(Engine, SelectionRatiosAndPowerLawRanks) {
  auto c = config_from(R"({"num_islands": 1, "exploration_ratio": 0.3, "exploitation_ratio": 0.5,
    "weighted_ratio": 0.2, "repair_ratio": 0.0, "migration_interval": 0, "power_law_alpha": 1.5,
    "feature_dimensions": ["score"], "feature_ranges": {"score": [0, 100]}, "feature_bins": 4})");
  ks::Engine e(c, 7);
  ks::Program s = seed_program(0);
  s.island = 0;
  for (int i = 0; i < 50; ++i) {
    s.source = "v = " + std::to_string(i) + "\n";
    s.metrics = {{"score", static_cast<double>(i)}};
    e.add_seed(s);
  }
  // rank r <-> score 49 - r.
  std::map<std::string, int> modes;
  std::vector<int> rank_hits(50, 0);
  const int n = 40000;
  int exploits = 0;
  for (int i = 0; i < n; ++i) {
    auto r = e.ask();
    ++modes[r.mode];
    if (r.mode == "exploit") {
      ++exploits;
      ++rank_hits[49 - static_cast<int>(r.parent.metrics.at("score"))];
    }
    e.cancel(r.id);
  }
  EXPECT_NEAR(modes["explore"] / double(n), 0.3, 0.015);
  EXPECT_NEAR(modes["exploit"] / double(n), 0.5, 0.015);
  EXPECT_NEAR(modes["weighted"] / double(n), 0.2, 0.015);
  // P(rank r) = ((r+1)^-0.5 - (r+2)^-0.5) / (1 - 51^-0.5)
  const double z = 1.0 - std::pow(51.0, -0.5);
  for (int r : {0, 1, 2, 5, 20}) {
    const double expected = (std::pow(r + 1.0, -0.5) - std::pow(r + 2.0, -0.5)) / z;
    const double sd = std::sqrt(expected * (1 - expected) / exploits);
    EXPECT_NEAR(rank_hits[r] / double(exploits), expected, 5 * sd + 1e-4) << "rank " << r;
  }
  EXPECT_GT(rank_hits[0], rank_hits[1]);
  EXPECT_GT(rank_hits[1], rank_hits[10]);
}

TEST(Engine, RepairRequestsHandBackRecentFailures) {
  auto c = config_from(R"({"num_islands": 1, "repair_ratio": 1.0, "recent_failures": 2,
    "migration_interval": 0})");
  ks::Engine e(c, 3);
  e.add_seed(seed_program(1.0));
  std::set<std::int64_t> failed;
  for (int i = 0; i < 3; ++i) {
    ks::Program f;
    f.source = "broken " + std::to_string(i);
    f.status = ks::Status::CompileFailed;
    f.feedback = {{"error", "boom " + std::to_string(i)}};
    failed.insert(e.tell(f).id);
  }
  EXPECT_EQ(e.stats().island_failures[0], 2);  // bounded: the oldest fell off
  auto r1 = e.ask();
  auto r2 = e.ask();
  EXPECT_EQ(r1.mode, "repair");
  EXPECT_EQ(r2.mode, "repair");
  EXPECT_NE(r1.parent.id, r2.parent.id);
  EXPECT_EQ(r1.parent.status, ks::Status::CompileFailed);
  EXPECT_NE(r1.parent.feedback.at("error").get<std::string>().find("boom"), std::string::npos);
  EXPECT_FALSE(r1.inspirations.empty());       // the island best helps the fix
  EXPECT_EQ(e.ask().mode == "repair", false);  // list exhausted: normal selection
}

TEST(Engine, MigrationRingNeverTwiceNoDuplicates) {
  auto c = config_from(R"({"num_islands": 3, "migration_interval": 5, "migration_rate": 0.5,
    "repair_ratio": 0.0})");
  ks::Engine e(c, 11);
  ks::Program s = seed_program(0);
  s.island = 0;
  e.add_seed(s);
  s.island = 1;
  e.add_seed(s);  // same code on island 1: migration from 0 must not duplicate it
  s.island = 2;
  s.source = "def g():\n    pass\n";
  e.add_seed(s);
  for (int i = 0; i < 60; ++i) {
    auto r = e.ask();
    auto ch = child_of(r);
    e.tell(ch, r.id);
  }
  auto st = e.stats();
  EXPECT_EQ(st.migrations, 12);
  EXPECT_GT(st.migrants, 0);
  std::map<std::int64_t, ks::Program> by_id;
  for (const auto& p : e.programs()) by_id[p.id] = p;
  std::map<std::int64_t, int> copies;
  for (int isl = 0; isl < 3; ++isl) {
    std::set<std::uint64_t> hashes;
    for (const auto& p : e.programs()) {
      if (p.island != isl || p.status != ks::Status::Correct) continue;
      EXPECT_TRUE(hashes.insert(ks::normalized_hash(p.source)).second) << "duplicate code on island " << isl;
    }
  }
  for (const auto& [id, p] : by_id) {
    if (p.migrated_from < 0) continue;
    ++copies[p.migrated_from];
    EXPECT_FALSE(p.migrated);  // a migrant is never sent on
    auto orig = by_id.find(p.migrated_from);
    if (orig != by_id.end()) {
      EXPECT_EQ(p.island, (orig->second.island + 1) % 3);  // ring
      EXPECT_TRUE(orig->second.migrated);
    }
  }
  for (const auto& [orig, n] : copies) EXPECT_EQ(n, 1) << "program " << orig << " migrated twice";
}

TEST(Engine, ManyThreadsAskAndTell) {
  auto c = config_from(R"({"num_islands": 4, "island_selection": "least_loaded",
    "migration_interval": 7, "population_size": 50})");
  ks::Engine e(c, 5);
  e.add_seed(seed_program(0));
  const int threads = 4, per_thread = 400;
  std::vector<std::thread> pool;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        try {
          auto r = e.ask();
          auto ch = child_of(r);
          ch.source += "# thread " + std::to_string(t) + "\nz" + std::to_string(t * per_thread + i) +
                       " = 0\n";
          e.tell(ch, r.id);
        } catch (...) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  auto st = e.stats();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(st.asks, threads * per_thread);
  EXPECT_EQ(st.tells, threads * per_thread);
  EXPECT_EQ(st.in_flight, 0);
  for (auto v : st.island_in_flight) EXPECT_EQ(v, 0);
  for (auto v : st.island_population) EXPECT_LE(v, 50);
}

TEST(Engine, StoppingRules) {
  auto c = config_from(R"({"num_islands": 1, "max_iterations": 5, "target_score": 100, "patience": 3})");
  ks::Engine e(c, 0);
  e.add_seed(seed_program(1.0));
  EXPECT_FALSE(e.should_stop());
  auto tell_score = [&](double s, int i) {
    ks::Program p = seed_program(s);
    p.source = "v = " + std::to_string(i) + "\n";
    e.tell(p);
  };
  tell_score(2.0, 1);
  tell_score(1.0, 2);
  tell_score(1.0, 3);
  EXPECT_FALSE(e.should_stop());
  tell_score(1.0, 4);
  EXPECT_EQ(*e.should_stop(), "patience");
  tell_score(200.0, 5);
  EXPECT_EQ(*e.should_stop(), "max_iterations");
  ks::Engine t(config_from(R"({"num_islands": 1, "target_score": 3})"), 0);
  t.add_seed(seed_program(3.0));
  EXPECT_EQ(*t.should_stop(), "target_score");
}

TEST(Checkpoint, RoundTripAndResumeDeterminism) {
  const auto dir = temp_dir("resume");
  const int k = 120, total = 300;
  std::vector<std::string> uninterrupted, resumed;
  {
    ks::Engine e(config_from(kSmallConfig), 42);
    e.add_seed(seed_program(0.5));
    for (int i = 0; i < total; ++i) {
      auto r = e.ask();
      uninterrupted.push_back(describe(r));
      e.tell(child_of(r), r.id);
    }
  }
  {
    ks::Engine e(config_from(kSmallConfig), 42);
    e.add_seed(seed_program(0.5));
    for (int i = 0; i < k; ++i) {
      auto r = e.ask();
      resumed.push_back(describe(r));
      e.tell(child_of(r), r.id);
    }
    const auto path = e.save(dir.string());
    auto loaded = ks::Engine::load(dir.string());
    // Round trip: the restored state serializes identically.
    EXPECT_EQ(loaded->state_to_json(), e.state_to_json());
    EXPECT_EQ(loaded->best()->id, e.best()->id);
    for (int i = k; i < total; ++i) {
      auto r = loaded->ask();
      resumed.push_back(describe(r));
      loaded->tell(child_of(r), r.id);
    }
  }
  EXPECT_EQ(uninterrupted, resumed);
  fs::remove_all(dir);
}

TEST(Checkpoint, InFlightRequestsAreReissuedAfterLoad) {
  const auto dir = temp_dir("inflight");
  ks::Engine e(config_from(kSmallConfig), 9);
  e.add_seed(seed_program(0.5));
  auto a = e.ask();
  auto b = e.ask();
  e.save(dir.string());
  auto loaded = ks::Engine::load(dir.string());
  EXPECT_EQ(loaded->stats().in_flight, 2);
  EXPECT_EQ(describe(loaded->ask()), describe(a));
  EXPECT_EQ(describe(loaded->ask()), describe(b));
  auto c = e.ask();
  EXPECT_EQ(describe(loaded->ask()), describe(c));  // then new asks continue the same stream
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptFileFailsClearlyAndPreviousStillLoads) {
  const auto dir = temp_dir("corrupt");
  auto c = config_from(R"({"num_islands": 2, "keep_checkpoints": 2})");
  ks::Engine e(c, 1);
  e.add_seed(seed_program(0.5));
  const auto first = e.save(dir.string());
  auto r = e.ask();
  e.tell(child_of(r), r.id);
  const auto second = e.save(dir.string());
  EXPECT_NE(first, second);
  const auto third = e.save(dir.string());
  EXPECT_FALSE(fs::exists(first));  // keep_checkpoints = 2
  // Truncate the newest.
  const auto size = fs::file_size(third);
  fs::resize_file(third, size / 2);
  try {
    ks::Engine::load(dir.string());
    FAIL() << "truncated checkpoint loaded";
  } catch (const ks::CorruptState& err) {
    EXPECT_NE(err.message().find("corrupt or truncated"), std::string::npos);
    EXPECT_NE(err.message().find(second), std::string::npos);
  }
  auto previous = ks::Engine::load(second);
  EXPECT_EQ(previous->stats().tells, 1);
  // A flipped byte inside the state is caught by the checksum.
  std::string text;
  {
    std::ifstream in(second);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto pos = text.find("\"tells\":1");
  ASSERT_NE(pos, std::string::npos);
  text[pos + 8] = '7';
  {
    std::ofstream out(third, std::ios::trunc);
    out << text;
  }
  EXPECT_THROW(ks::Engine::load(third), ks::CorruptState);
  EXPECT_THROW(ks::Engine::load((dir / "missing").string()), ks::InvalidArgument);
  fs::remove_all(dir);
}
