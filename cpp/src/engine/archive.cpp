#include "kernelsmith/engine/archive.hpp"

#include <algorithm>
#include <cmath>

#include "kernelsmith/error.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace kernelsmith {

double feature_value(const FeatureDim& dim, const Program& program) {
  if (dim.name == "complexity") return complexity(program.source);
  auto it = program.metrics.find(dim.name);
  KS_REQUIRE(
      it != program.metrics.end(), "program "
                                       << program.id << " has no metric '" << dim.name
                                       << "', which feature_dimensions uses; metrics present: " << [&] {
                                            std::string names;
                                            for (const auto& [k, v] : program.metrics)
                                              names += (names.empty() ? "" : ", ") + k;
                                            return names.empty() ? std::string("(none)") : names;
                                          }());
  KS_REQUIRE(std::isfinite(it->second),
             "metric '" << dim.name << "' of program " << program.id << " must be finite for binning");
  return it->second;
}

IslandArchive::IslandArchive(int index, std::vector<FeatureDim> dims, std::size_t population_size,
                             std::size_t elite_size, std::size_t max_failures)
    : index_(index),
      dims_(std::move(dims)),
      range_seen_(dims_.size(), false),
      population_size_(population_size),
      elite_size_(elite_size),
      max_failures_(max_failures) {
  for (std::size_t d = 0; d < dims_.size(); ++d) range_seen_[d] = dims_[d].fixed;
}

std::uint64_t IslandArchive::cell_key(const std::vector<int>& features) const {
  std::uint64_t key = 0;
  for (std::size_t d = dims_.size(); d-- > 0;) {
    key = key * static_cast<std::uint64_t>(dims_[d].bins) + static_cast<std::uint64_t>(features[d]);
  }
  return key;
}

std::vector<int> IslandArchive::bin(const std::vector<double>& values) const {
  std::vector<int> out(dims_.size(), 0);
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const FeatureDim& dim = dims_[d];
    const double span = dim.hi - dim.lo;
    if (!(span > 0.0)) continue;
    double b = std::floor((values[d] - dim.lo) / span * dim.bins);
    b = std::min(std::max(b, 0.0), static_cast<double>(dim.bins - 1));
    out[d] = static_cast<int>(b);
  }
  return out;
}

bool IslandArchive::widen_ranges(const std::vector<double>& values) {
  bool changed = false;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    FeatureDim& dim = dims_[d];
    if (dim.fixed) continue;
    const double v = values[d];
    if (!range_seen_[d]) {
      dim.lo = dim.hi = v;
      range_seen_[d] = true;
      continue;  // a single point: everything is bin 0, nothing to re-bin
    }
    if (v >= dim.lo && v <= dim.hi) continue;
    // Grow past the new value by 10% of the span so a slowly drifting value
    // does not trigger a re-binning on every insert.
    const double lo = std::min(dim.lo, v), hi = std::max(dim.hi, v);
    const double margin = 0.1 * (hi - lo);
    if (v < dim.lo) dim.lo = lo - margin;
    if (v > dim.hi) dim.hi = hi + margin;
    changed = true;
  }
  return changed;
}

void IslandArchive::place_in_cell(const ProgramPtr& program, bool* owns) {
  const std::uint64_t key = cell_key(program->features);
  auto it = cell_owner_.find(key);
  if (it == cell_owner_.end()) {
    cell_owner_.emplace(key, program);
    cell_keys_.push_back(key);
    if (owns) *owns = true;
    return;
  }
  // Strictly fitter wins; on a tie the incumbent (older) program stays.
  if (program->score() > it->second->score()) {
    it->second = program;
    if (owns) *owns = true;
  }
}

void IslandArchive::rebin_all() {
  ++rebins_;
  cell_owner_.clear();
  cell_keys_.clear();
  // Rank order (best first, then lower id) makes the rebuilt grid a pure
  // function of the population: the fittest program of each cell owns it.
  for (auto it = ranked_.begin(); it != ranked_.end(); ++it) {
    const ProgramPtr& p = members_.at(it->second);
    p->features = bin(p->feature_values);
    place_in_cell(p, nullptr);
  }
}

IslandArchive::InsertResult IslandArchive::insert(const ProgramPtr& program) {
  InsertResult result;
  KS_REQUIRE(program->status == Status::Correct,
             "only programs with status 'correct' enter the archive, got '" << status_name(program->status)
                                                                            << "'");
  KS_REQUIRE(program->feature_values.size() == dims_.size(),
             "program " << program->id << " has " << program->feature_values.size()
                        << " feature values, archive has " << dims_.size() << " dimensions");
  if (contains_code(program->code_hash)) return result;
  program->island = index_;
  members_.emplace(program->id, program);
  ranked_.insert({-program->score(), program->id});
  ++code_count_[program->code_hash];
  result.inserted = true;
  if (widen_ranges(program->feature_values)) {
    rebin_all();
    result.owns_cell = is_cell_owner(*program);
  } else {
    program->features = bin(program->feature_values);
    place_in_cell(program, &result.owns_cell);
  }
  evict_if_needed(&result.evicted);
  return result;
}

void IslandArchive::remove_member(const ProgramPtr& program) {
  ranked_.erase({-program->score(), program->id});
  members_.erase(program->id);
  auto it = code_count_.find(program->code_hash);
  if (it != code_count_.end() && --it->second == 0) code_count_.erase(it);
}

void IslandArchive::evict_if_needed(std::vector<std::int64_t>* evicted) {
  while (ranked_.size() > population_size_) {
    // Worst first; cell owners and the top elite_size (the best among them)
    // are protected. If every member is protected the island stays above
    // its limit (the grid is larger than the population limit).
    const std::size_t protected_ranks = std::max<std::size_t>(elite_size_, 1);
    ProgramPtr victim;
    std::size_t rank = ranked_.size();
    for (auto it = ranked_.end(); it != ranked_.begin();) {
      --it;
      --rank;
      if (rank < protected_ranks) break;
      const ProgramPtr& p = members_.at(it->second);
      if (!is_cell_owner(*p)) {
        victim = p;
        break;
      }
    }
    if (!victim) return;
    remove_member(victim);
    evicted->push_back(victim->id);
  }
}

std::int64_t IslandArchive::add_failure(const ProgramPtr& program) {
  program->island = index_;
  failures_.push_back(program);
  if (failures_.size() > max_failures_) {
    std::int64_t dropped = failures_.front()->id;
    failures_.pop_front();
    return dropped;
  }
  return -1;
}

ProgramPtr IslandArchive::take_failure(std::size_t index) {
  KS_REQUIRE(index < failures_.size(), "failure index " << index << " out of range");
  ProgramPtr p = failures_[index];
  failures_.erase(failures_.begin() + static_cast<std::ptrdiff_t>(index));
  return p;
}

bool IslandArchive::drop_failure(std::int64_t id) {
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if ((*it)->id == id) {
      failures_.erase(it);
      return true;
    }
  }
  return false;
}

ProgramPtr IslandArchive::best() const { return ranked_.empty() ? nullptr : at_rank(0); }

ProgramPtr IslandArchive::at_rank(std::size_t rank) const {
  if (rank >= ranked_.size()) return nullptr;
  return members_.at(ranked_.find_by_order(rank)->second);
}

ProgramPtr IslandArchive::cell_at(std::size_t index) const { return cell_owner_.at(cell_keys_.at(index)); }

ProgramPtr IslandArchive::owner_of(const std::vector<int>& features) const {
  if (features.size() != dims_.size()) return nullptr;
  auto it = cell_owner_.find(cell_key(features));
  return it == cell_owner_.end() ? nullptr : it->second;
}

bool IslandArchive::is_cell_owner(const Program& program) const {
  ProgramPtr owner = owner_of(program.features);
  return owner && owner->id == program.id;
}

bool IslandArchive::contains_code(std::uint64_t code_hash) const { return code_count_.count(code_hash) > 0; }

ProgramPtr IslandArchive::find(std::int64_t id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : it->second;
}

std::vector<ProgramPtr> IslandArchive::elites(std::size_t n) const {
  std::vector<ProgramPtr> out;
  for (auto it = ranked_.begin(); it != ranked_.end() && out.size() < n; ++it)
    out.push_back(members_.at(it->second));
  return out;
}

std::vector<ProgramPtr> IslandArchive::neighbours(const std::vector<int>& features) const {
  std::vector<ProgramPtr> out;
  if (features.size() != dims_.size()) return out;
  std::vector<int> probe = features;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    for (int step : {-1, 1}) {
      const int v = features[d] + step;
      if (v < 0 || v >= dims_[d].bins) continue;
      probe[d] = v;
      if (ProgramPtr p = owner_of(probe)) out.push_back(p);
      probe[d] = features[d];
    }
  }
  return out;
}

std::vector<std::pair<std::vector<int>, ProgramPtr>> IslandArchive::cells() const {
  std::vector<std::pair<std::vector<int>, ProgramPtr>> out;
  out.reserve(cell_keys_.size());
  for (std::uint64_t key : cell_keys_) {
    const ProgramPtr& p = cell_owner_.at(key);
    out.emplace_back(p->features, p);
  }
  return out;
}

std::vector<ProgramPtr> IslandArchive::members() const { return elites(ranked_.size()); }

nlohmann::json IslandArchive::state_to_json() const {
  nlohmann::json ranges = nlohmann::json::array();
  for (std::size_t d = 0; d < dims_.size(); ++d)
    ranges.push_back({{"lo", dims_[d].lo}, {"hi", dims_[d].hi}, {"seen", static_cast<bool>(range_seen_[d])}});
  nlohmann::json members = nlohmann::json::array();
  for (auto it = ranked_.begin(); it != ranked_.end(); ++it) members.push_back(it->second);
  nlohmann::json cells = nlohmann::json::array();
  for (std::uint64_t key : cell_keys_) cells.push_back(cell_owner_.at(key)->id);
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& p : failures_) failures.push_back(p->id);
  return {{"ranges", ranges},
          {"members", members},
          {"cells", cells},
          {"failures", failures},
          {"rebins", rebins_}};
}

void IslandArchive::state_from_json(const nlohmann::json& state,
                                    const std::function<ProgramPtr(std::int64_t)>& lookup) {
  const auto& ranges = state.at("ranges");
  KS_REQUIRE(ranges.size() == dims_.size(),
             "island " << index_ << ": " << ranges.size() << " ranges for " << dims_.size() << " dimensions");
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    dims_[d].lo = ranges[d].at("lo").get<double>();
    dims_[d].hi = ranges[d].at("hi").get<double>();
    range_seen_[d] = ranges[d].at("seen").get<bool>();
  }
  for (const auto& id : state.at("members")) {
    ProgramPtr p = lookup(id.get<std::int64_t>());
    members_.emplace(p->id, p);
    ranked_.insert({-p->score(), p->id});
    ++code_count_[p->code_hash];
  }
  // Cells in their recorded occupation order (uniform cell draws index it).
  for (const auto& id : state.at("cells")) {
    ProgramPtr p = find(id.get<std::int64_t>());
    KS_REQUIRE(p, "island " << index_ << ": cell owner " << id << " is not a member");
    const std::uint64_t key = cell_key(p->features);
    KS_REQUIRE(!cell_owner_.count(key), "island " << index_ << ": two owners for one cell");
    cell_owner_.emplace(key, p);
    cell_keys_.push_back(key);
  }
  for (const auto& id : state.at("failures")) failures_.push_back(lookup(id.get<std::int64_t>()));
  rebins_ = state.at("rebins").get<std::int64_t>();
}

}  // namespace kernelsmith
