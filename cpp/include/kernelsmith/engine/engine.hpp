// The steady-state evolution engine: MAP-Elites islands with migration,
// ask/tell from many threads, duplicate rejection, stopping rules and
// atomic, deterministic checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernelsmith/engine/archive.hpp"
#include "kernelsmith/engine/program.hpp"

namespace kernelsmith {

// Every option; from_json rejects unknown keys and bad values at once with a
// message naming the key and what is allowed. Defaults are documented in
// docs/engine.md and python/kernelsmith/engine.py (EngineConfig).
struct EngineConfig {
  int num_islands = 4;
  std::vector<std::string> feature_dimensions = {"complexity", "score"};
  std::map<std::string, int> feature_bins;  // per dimension; default_bins otherwise
  int default_bins = 10;
  std::map<std::string, std::pair<double, double>> feature_ranges;  // fixed ranges; others adaptive
  std::vector<std::string> metrics;  // extra metric names usable as feature dimensions
  int population_size = 1000;        // per island
  int elite_size = 10;               // per island; never evicted
  int num_inspirations = 4;
  int inspiration_elites = 1;               // after the island best
  int inspiration_neighbours = 2;           // owners of neighbouring cells, then random
  double exploration_ratio = 0.2;           // uniform random cell
  double exploitation_ratio = 0.7;          // rank-based power law
  double weighted_ratio = 0.1;              // fitness-proportional over cell owners
  double power_law_alpha = 1.0;             // P(rank r) ~ (r+1)^-alpha
  double repair_ratio = 0.1;                // share of asks that hand back a recent failure
  int recent_failures = 16;                 // per island
  int migration_interval = 50;              // tells between migrations; 0 disables
  double migration_rate = 0.1;              // share of an island's occupied cells sent (its best programs)
  std::string migration_topology = "ring";  // ring | all
  std::string island_selection = "round_robin";  // round_robin | least_loaded
  std::int64_t max_iterations = 0;               // tells (children) before stopping; 0: no limit
  std::optional<double> target_score;            // stop when best score >= this
  std::int64_t patience = 0;                     // tells without improvement; 0: no limit
  int keep_checkpoints = 3;                      // checkpoint files kept in a directory

  static EngineConfig from_json(const nlohmann::json& json);
  nlohmann::json to_json() const;
  // Throws InvalidArgument naming the key and allowed values.
  void validate() const;
  std::vector<FeatureDim> dims() const;
};

struct Request {
  std::int64_t id = -1;
  int island = 0;
  Program parent;
  std::vector<Program> inspirations;
  std::string mode;  // explore | exploit | weighted | repair
  std::int64_t iteration = 0;
};

nlohmann::json request_to_json(const Request& request);
Request request_from_json(const nlohmann::json& json);

struct TellResult {
  std::int64_t id = -1;
  bool inserted = false;  // entered the island population (correct, not a duplicate)
  bool owns_cell = false;
  bool new_best = false;
};

struct EngineStats {
  std::int64_t asks = 0, tells = 0, migrations = 0, migrants = 0, repairs = 0;
  std::int64_t programs = 0, in_flight = 0, evictions = 0, duplicates = 0;
  double best_score = 0.0;
  std::int64_t best_id = -1;
  std::vector<std::int64_t> island_population, island_cells, island_failures, island_in_flight;
};

class Engine {
 public:
  explicit Engine(EngineConfig config, std::uint64_t seed = 0);

  // Initial program. island -1 puts a copy on every island. A failed status
  // puts it on the repair list. Returns the id(s) given.
  std::vector<std::int64_t> add_seed(Program program);

  Request ask();
  TellResult tell(Program program, std::int64_t request_id = -1);
  // Closes a request without a result (e.g. the proposer gave up).
  void cancel(std::int64_t request_id);

  // True when normalize_source(source) was seeded or told before.
  bool seen(const std::string& source) const;
  // Records source as seen without telling a program (rejected before evaluation).
  void mark_seen(const std::string& source);

  // "max_iterations" | "target_score" | "patience", or nullopt.
  std::optional<std::string> should_stop() const;

  std::optional<Program> best() const;
  std::optional<Program> program(std::int64_t id) const;
  std::vector<Program> programs() const;                         // every live program, by id
  std::vector<Program> elites(int island, std::size_t n) const;  // island -1: all islands
  std::vector<std::pair<std::vector<int>, Program>> archive_cells(int island) const;
  std::vector<Request> pending_requests() const;
  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  std::uint64_t seed() const { return seed_; }
  // The id the next told program will get when it brings none (id -1). A
  // caller that applies results one at a time can record the id before the
  // tell, so a log written ahead of the tell names the program correctly.
  std::int64_t next_program_id() const;

  // Writes <dir>/checkpoint-NNNNNN.json atomically (temp file, fsync,
  // rename, fsync dir); never touches an existing checkpoint; keeps the
  // newest keep_checkpoints files. Returns the file written.
  std::string save(const std::string& dir) const;
  // `path` is a checkpoint file or a directory (its newest checkpoint).
  // Corrupt or truncated files raise CorruptState naming the previous one.
  static std::unique_ptr<Engine> load(const std::string& path);
  static std::vector<std::string> list_checkpoints(const std::string& dir);

  nlohmann::json state_to_json() const;
  static std::unique_ptr<Engine> from_state(const nlohmann::json& state);

 private:
  std::uint64_t next_u64();
  double uniform01();
  std::uint64_t below(std::uint64_t n);  // uniform in [0, n)
  std::size_t power_law_rank(std::size_t n);

  int choose_island();
  ProgramPtr select_parent(const IslandArchive& island, const std::string& mode);
  std::vector<Program> select_inspirations(const IslandArchive& island, const Program& parent);
  const IslandArchive* source_island_for(int island) const;
  void store(const ProgramPtr& program);
  void forget(std::int64_t id);
  TellResult insert_locked(const ProgramPtr& program, bool count_iteration);
  void fill_features(Program& program) const;
  void maybe_migrate();
  void migrate_locked();

  EngineConfig config_;
  std::uint64_t seed_;
  std::vector<FeatureDim> dims_;
  mutable std::mutex mutex_;
  std::mt19937_64 rng_;
  std::vector<IslandArchive> islands_;
  std::unordered_map<std::int64_t, ProgramPtr> programs_;
  std::unordered_set<std::uint64_t> seen_;
  std::map<std::int64_t, Request> pending_;  // by request id
  std::vector<std::int64_t> reissue_;        // restored in-flight requests, issued first
  std::vector<int> in_flight_;
  std::int64_t next_program_id_ = 0;
  std::int64_t next_request_id_ = 0;
  std::int64_t asks_ = 0, tells_ = 0, migrations_ = 0, migrants_ = 0, repairs_ = 0;
  std::int64_t evictions_ = 0, duplicates_ = 0;
  std::int64_t round_robin_ = 0;
  std::int64_t last_improvement_tell_ = 0;
  std::int64_t best_id_ = -1;
  double best_score_ = 0.0;
};

}  // namespace kernelsmith
