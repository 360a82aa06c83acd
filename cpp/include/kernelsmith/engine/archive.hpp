// MAP-Elites archive of one island: a grid of cells over configurable feature
// dimensions, each cell owned by its fittest program, plus the island's whole
// population ranked by score and a bounded list of recent failures.
//
// Costs (n = island population): insert O(log n) (plus an O(n) re-binning
// when an adaptive range grows, which is rare: ranges grow with a 10% margin),
// rank lookup O(log n), random cell O(1). No per-ask scan of the population.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <nlohmann/json.hpp>

#include "kernelsmith/engine/program.hpp"

namespace kernelsmith {

using ProgramPtr = std::shared_ptr<Program>;

// One axis of the grid.
struct FeatureDim {
  std::string name;  // "complexity", "score", or a metric name
  int bins = 10;
  bool fixed = false;  // fixed [lo, hi] range; otherwise adaptive (observed min/max)
  double lo = 0.0;
  double hi = 1.0;
};

// Raw value of dimension `dim` for `program` (complexity is computed from the
// source; other names read metrics). InvalidArgument when a metric is missing.
double feature_value(const FeatureDim& dim, const Program& program);

class IslandArchive {
 public:
  IslandArchive(int index, std::vector<FeatureDim> dims, std::size_t population_size, std::size_t elite_size,
                std::size_t max_failures);

  struct InsertResult {
    bool inserted = false;              // false: identical (normalized) code already on the island
    bool owns_cell = false;             // the program took (or kept) a cell
    std::vector<std::int64_t> evicted;  // ids removed from the population
  };

  // Adds a Correct program (features computed from feature_values, which the
  // caller fills with feature_value for each dim).
  InsertResult insert(const ProgramPtr& program);

  // Adds a failed program; returns the id pushed out of the bounded list, or -1.
  std::int64_t add_failure(const ProgramPtr& program);
  // Removes and returns failure number `index` (0 = oldest).
  ProgramPtr take_failure(std::size_t index);
  // Drops a failure by id (used when a re-issued request closes). Returns true if found.
  bool drop_failure(std::int64_t id);
  const std::deque<ProgramPtr>& failures() const { return failures_; }

  std::size_t size() const { return ranked_.size(); }
  std::size_t num_cells() const { return cell_keys_.size(); }
  bool empty() const { return ranked_.empty(); }

  ProgramPtr best() const;                      // nullptr when empty
  ProgramPtr at_rank(std::size_t rank) const;   // 0 = best
  ProgramPtr cell_at(std::size_t index) const;  // owner of the index-th occupied cell
  ProgramPtr owner_of(const std::vector<int>& features) const;
  bool is_cell_owner(const Program& program) const;
  bool contains_code(std::uint64_t code_hash) const;
  ProgramPtr find(std::int64_t id) const;

  // Top `n` by score (best first).
  std::vector<ProgramPtr> elites(std::size_t n) const;
  // Owners of the cells at L1 distance 1 from `features`, in dimension order.
  std::vector<ProgramPtr> neighbours(const std::vector<int>& features) const;
  // Every occupied cell (key order of occupation) with its owner.
  std::vector<std::pair<std::vector<int>, ProgramPtr>> cells() const;
  // Every member, best first.
  std::vector<ProgramPtr> members() const;

  const std::vector<FeatureDim>& dims() const { return dims_; }
  const std::vector<bool>& range_seen() const { return range_seen_; }
  int index() const { return index_; }
  std::int64_t rebins() const { return rebins_; }

  // Archive state for checkpoints (programs are stored by the engine; this
  // holds ids, ranges and the cell order).
  nlohmann::json state_to_json() const;
  // Rebuilds from state with programs looked up by id.
  void state_from_json(const nlohmann::json& state, const std::function<ProgramPtr(std::int64_t)>& lookup);

 private:
  using RankKey = std::pair<double, std::int64_t>;  // (-score, id): best first
  using RankTree = __gnu_pbds::tree<RankKey, __gnu_pbds::null_type, std::less<RankKey>,
                                    __gnu_pbds::rb_tree_tag, __gnu_pbds::tree_order_statistics_node_update>;

  std::uint64_t cell_key(const std::vector<int>& features) const;
  std::vector<int> bin(const std::vector<double>& values) const;
  bool widen_ranges(const std::vector<double>& values);  // true when a range changed
  void rebin_all();
  void place_in_cell(const ProgramPtr& program, bool* owns);
  void evict_if_needed(std::vector<std::int64_t>* evicted);
  void remove_member(const ProgramPtr& program);

  int index_;
  std::vector<FeatureDim> dims_;
  std::vector<bool> range_seen_;
  std::size_t population_size_;
  std::size_t elite_size_;
  std::size_t max_failures_;
  std::int64_t rebins_ = 0;

  RankTree ranked_;
  std::unordered_map<std::int64_t, ProgramPtr> members_;
  std::unordered_map<std::uint64_t, int> code_count_;
  std::vector<std::uint64_t> cell_keys_;  // occupation order, for O(1) uniform cell draws
  std::unordered_map<std::uint64_t, ProgramPtr> cell_owner_;
  std::deque<ProgramPtr> failures_;
};

}  // namespace kernelsmith
