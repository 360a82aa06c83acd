#include "kernelsmith/engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "kernelsmith/error.hpp"
#include "kernelsmith/log.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace kernelsmith {

namespace {
double now_seconds() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}
}  // namespace

nlohmann::json request_to_json(const Request& r) {
  nlohmann::json insp = nlohmann::json::array();
  for (const auto& p : r.inspirations) insp.push_back(program_to_json(p));
  return {{"id", r.id},           {"island", r.island}, {"parent", program_to_json(r.parent)},
          {"inspirations", insp}, {"mode", r.mode},     {"iteration", r.iteration}};
}

Request request_from_json(const nlohmann::json& j) {
  Request r;
  r.id = j.at("id").get<std::int64_t>();
  r.island = j.at("island").get<int>();
  r.parent = program_from_json(j.at("parent"));
  for (const auto& p : j.at("inspirations")) r.inspirations.push_back(program_from_json(p));
  r.mode = j.at("mode").get<std::string>();
  r.iteration = j.at("iteration").get<std::int64_t>();
  return r;
}

Engine::Engine(EngineConfig config, std::uint64_t seed)
    : config_(std::move(config)), seed_(seed), rng_(seed) {
  config_.validate();
  dims_ = config_.dims();
  for (int i = 0; i < config_.num_islands; ++i) {
    islands_.emplace_back(i, dims_, static_cast<std::size_t>(config_.population_size),
                          static_cast<std::size_t>(config_.elite_size),
                          static_cast<std::size_t>(config_.recent_failures));
  }
  in_flight_.assign(static_cast<std::size_t>(config_.num_islands), 0);
}

// Random numbers come straight from the mt19937_64 stream (no std::
// distributions, whose algorithms differ between standard libraries), so a
// checkpoint replays identically wherever it is loaded.
std::uint64_t Engine::next_u64() { return rng_(); }

double Engine::uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

std::uint64_t Engine::below(std::uint64_t n) {
  if (n <= 1) return 0;
  // Rejection sampling for an exactly uniform draw.
  const std::uint64_t limit = (~std::uint64_t{0}) - ((~std::uint64_t{0}) % n);
  std::uint64_t x;
  do {
    x = rng_();
  } while (x >= limit);
  return x % n;
}

// Inverse CDF of a continuous power law on [1, n+1) with exponent alpha;
// floor(x)-1 is the rank. P(rank r) = integral over [r+1, r+2) of x^-alpha,
// normalized: a power law in rank, drawn in O(1).
std::size_t Engine::power_law_rank(std::size_t n) {
  if (n <= 1) return 0;
  const double u = uniform01();
  const double top = static_cast<double>(n) + 1.0;
  const double a = config_.power_law_alpha;
  double x;
  if (std::fabs(a - 1.0) < 1e-12) {
    x = std::pow(top, u);
  } else {
    const double e = 1.0 - a;
    x = std::pow(1.0 + u * (std::pow(top, e) - 1.0), 1.0 / e);
  }
  auto r = static_cast<std::int64_t>(std::floor(x)) - 1;
  r = std::min<std::int64_t>(std::max<std::int64_t>(r, 0), static_cast<std::int64_t>(n) - 1);
  return static_cast<std::size_t>(r);
}

int Engine::choose_island() {
  const int k = config_.num_islands;
  const int start = static_cast<int>(round_robin_ % k);
  ++round_robin_;
  if (config_.island_selection == "round_robin") return start;
  // Least loaded; ties go to the round-robin position so a sequential caller
  // still visits every island.
  int chosen = start;
  for (int step = 1; step < k; ++step) {
    const int i = (start + step) % k;
    if (in_flight_[i] < in_flight_[chosen]) chosen = i;
  }
  return chosen;
}

const IslandArchive* Engine::source_island_for(int island) const {
  const int k = config_.num_islands;
  for (int step = 0; step < k; ++step) {
    const IslandArchive& a = islands_[(island + step) % k];
    if (!a.empty()) return &a;
  }
  return nullptr;
}

ProgramPtr Engine::select_parent(const IslandArchive& island, const std::string& mode) {
  if (mode == "explore") return island.cell_at(below(island.num_cells()));
  if (mode == "exploit") return island.at_rank(power_law_rank(island.size()));
  // weighted: fitness-proportional over cell owners (bounded by the grid size,
  // not the population), shifted so the worst owner keeps a small chance.
  const auto cells = island.cells();
  double lo = cells.front().second->score(), hi = lo;
  for (const auto& c : cells) {
    lo = std::min(lo, c.second->score());
    hi = std::max(hi, c.second->score());
  }
  const double floor_weight = hi > lo ? 0.05 * (hi - lo) : 1.0;
  double total = 0.0;
  for (const auto& c : cells) total += c.second->score() - lo + floor_weight;
  double target = uniform01() * total;
  for (const auto& c : cells) {
    target -= c.second->score() - lo + floor_weight;
    if (target < 0.0) return c.second;
  }
  return cells.back().second;
}

std::vector<Program> Engine::select_inspirations(const IslandArchive& island, const Program& parent) {
  std::vector<Program> out;
  const auto want = static_cast<std::size_t>(config_.num_inspirations);
  if (want == 0 || island.empty()) return out;
  std::vector<std::int64_t> chosen = {parent.id};
  auto taken = [&](const ProgramPtr& p) {
    return std::find(chosen.begin(), chosen.end(), p->id) != chosen.end();
  };
  auto add = [&](const ProgramPtr& p) {
    if (!p || out.size() >= want || taken(p)) return;
    chosen.push_back(p->id);
    out.push_back(*p);
  };
  // Pick up to `count` of `pool` at random without replacement.
  auto add_some = [&](std::vector<ProgramPtr> pool, int count) {
    pool.erase(std::remove_if(pool.begin(), pool.end(), taken), pool.end());
    for (int i = 0; i < count && !pool.empty() && out.size() < want; ++i) {
      const std::size_t j = below(pool.size());
      add(pool[j]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(j));
    }
  };
  add(island.best());
  add_some(island.elites(static_cast<std::size_t>(std::max(config_.elite_size, 1))),
           config_.inspiration_elites);
  add_some(island.neighbours(parent.features), config_.inspiration_neighbours);
  // Random fill; a few extra draws cover collisions with programs already taken.
  for (std::size_t tries = 0; out.size() < want && tries < 3 * want; ++tries) {
    add(island.at_rank(below(island.size())));
  }
  return out;
}

void Engine::store(const ProgramPtr& program) { programs_[program->id] = program; }

void Engine::forget(std::int64_t id) { programs_.erase(id); }

void Engine::fill_features(Program& program) const {
  program.feature_values.clear();
  for (const auto& dim : dims_) program.feature_values.push_back(feature_value(dim, program));
}

TellResult Engine::insert_locked(const ProgramPtr& p, bool count_iteration) {
  TellResult result;
  result.id = p->id;
  seen_.insert(p->code_hash);
  IslandArchive& island = islands_[static_cast<std::size_t>(p->island)];
  if (p->status == Status::Correct) {
    auto ins = island.insert(p);
    if (!ins.inserted) {
      ++duplicates_;
    } else {
      store(p);
      for (std::int64_t id : ins.evicted) forget(id);
      evictions_ += static_cast<std::int64_t>(ins.evicted.size());
      result.inserted = true;
      result.owns_cell = ins.owns_cell;
      if (best_id_ < 0 || p->score() > best_score_) {
        best_id_ = p->id;
        best_score_ = p->score();
        last_improvement_tell_ = tells_;
        result.new_best = true;
      }
    }
  } else {
    store(p);
    const std::int64_t dropped = island.add_failure(p);
    if (dropped >= 0) forget(dropped);
  }
  if (count_iteration && config_.migration_interval > 0 && config_.num_islands > 1 &&
      tells_ % config_.migration_interval == 0) {
    migrate_locked();
  }
  return result;
}

void Engine::migrate_locked() {
  ++migrations_;
  const int k = config_.num_islands;
  for (int s = 0; s < k; ++s) {
    IslandArchive& source = islands_[static_cast<std::size_t>(s)];
    if (source.empty() || config_.migration_rate <= 0.0) continue;
    // A share of the island's archive (its occupied cells), not of its whole
    // population: the cost of a migration stays bounded by the grid size.
    const auto count = static_cast<std::size_t>(
        std::max(1.0, std::ceil(config_.migration_rate * static_cast<double>(source.num_cells()))));
    // The best programs that never migrated and are not migrants themselves;
    // the scan is bounded so a long run never pays O(population) here.
    std::vector<ProgramPtr> chosen;
    const std::size_t scan = std::min(source.size(), 8 * count + 32);
    for (std::size_t r = 0; r < scan && chosen.size() < count; ++r) {
      ProgramPtr p = source.at_rank(r);
      if (!p->migrated && p->migrated_from < 0) chosen.push_back(p);
    }
    std::vector<int> targets;
    if (config_.migration_topology == "ring") {
      targets.push_back((s + 1) % k);
    } else {
      for (int d = 1; d < k; ++d) targets.push_back((s + d) % k);
    }
    for (const ProgramPtr& p : chosen) {
      p->migrated = true;
      for (int t : targets) {
        if (islands_[static_cast<std::size_t>(t)].contains_code(p->code_hash)) continue;
        auto copy = std::make_shared<Program>(*p);
        copy->id = next_program_id_++;
        copy->island = t;
        copy->migrated_from = p->id;
        copy->migrated = false;
        copy->features.clear();
        copy->created = now_seconds();
        if (insert_locked(copy, false).inserted) ++migrants_;
      }
    }
  }
  logger()->debug("migration {}: {} migrants so far", migrations_, migrants_);
}

std::vector<std::int64_t> Engine::add_seed(Program program) {
  KS_REQUIRE(program.status != Status::Pending,
             "add_seed: status must be one of edit-failed, compile-failed, incorrect, hacked, "
             "correct (got 'pending'); a seed program is usually 'correct'");
  KS_REQUIRE(program.island >= -1 && program.island < config_.num_islands,
             "add_seed: island must be -1 (every island) or in [0, " << config_.num_islands << "), got "
                                                                     << program.island);
  if (program.status == Status::Correct) {
    auto it = program.metrics.find("score");
    KS_REQUIRE(it != program.metrics.end() && !std::isnan(it->second),
               "add_seed: a correct program needs a numeric metrics['score']");
    fill_features(program);
  }
  program.code_hash = normalized_hash(program.source);
  if (program.created == 0.0) program.created = now_seconds();
  program.migrated = false;
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int> targets;
  if (program.island >= 0) {
    targets.push_back(program.island);
  } else {
    KS_REQUIRE(program.id < 0 || config_.num_islands == 1,
               "add_seed: a program with a preset id needs an island (island -1 copies it to every island)");
    for (int i = 0; i < config_.num_islands; ++i) targets.push_back(i);
  }
  std::vector<std::int64_t> ids;
  for (int isl : targets) {
    auto p = std::make_shared<Program>(program);
    p->island = isl;
    if (p->id < 0) {
      p->id = next_program_id_++;
    } else {
      KS_REQUIRE(!programs_.count(p->id), "add_seed: program id " << p->id << " is already used");
      next_program_id_ = std::max(next_program_id_, p->id + 1);
    }
    insert_locked(p, false);
    ids.push_back(p->id);
  }
  return ids;
}

Request Engine::ask() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!reissue_.empty()) {
    // Requests that were in flight when the checkpoint was written come back
    // first, unchanged, so a resumed run does the same work.
    const std::int64_t id = reissue_.front();
    reissue_.erase(reissue_.begin());
    return pending_.at(id);
  }
  const int isl = choose_island();
  const IslandArchive* source = source_island_for(isl);
  IslandArchive* repair_from = &islands_[static_cast<std::size_t>(isl)];
  if (!source && repair_from->failures().empty()) {
    repair_from = nullptr;
    for (auto& a : islands_)
      if (!a.failures().empty()) {
        repair_from = &a;
        break;
      }
    if (!repair_from) {
      --round_robin_;
      KS_THROW(Error, "ask(): the engine holds no program yet; call add_seed() first");
    }
  }
  ++asks_;
  Request r;
  r.id = next_request_id_++;
  r.island = isl;
  r.iteration = asks_;
  const double u_repair = uniform01();
  const double u_mode = uniform01();
  ProgramPtr parent;
  if (!repair_from->failures().empty() && (!source || u_repair < config_.repair_ratio)) {
    parent = repair_from->take_failure(below(repair_from->failures().size()));
    forget(parent->id);
    r.mode = "repair";
    ++repairs_;
  } else {
    const double total = config_.exploration_ratio + config_.exploitation_ratio + config_.weighted_ratio;
    const double x = u_mode * total;
    if (x < config_.exploration_ratio) {
      r.mode = "explore";
    } else if (x < config_.exploration_ratio + config_.exploitation_ratio) {
      r.mode = "exploit";
    } else {
      r.mode = "weighted";
    }
    parent = select_parent(*source, r.mode);
  }
  r.parent = *parent;
  if (source) r.inspirations = select_inspirations(*source, r.parent);
  pending_.emplace(r.id, r);
  ++in_flight_[static_cast<std::size_t>(isl)];
  return r;
}

TellResult Engine::tell(Program program, std::int64_t request_id) {
  KS_REQUIRE(program.status != Status::Pending,
             "tell: status must be one of edit-failed, compile-failed, incorrect, hacked, correct "
             "(got 'pending'); set it from the evaluation result");
  if (program.status == Status::Correct) {
    auto it = program.metrics.find("score");
    KS_REQUIRE(it != program.metrics.end() && !std::isnan(it->second),
               "tell: a correct program needs a numeric metrics['score']");
  }
  // Everything that can fail is checked before any state changes, so a bad
  // tell leaves the engine (and its request) untouched.
  if (program.status == Status::Correct) fill_features(program);
  program.code_hash = normalized_hash(program.source);
  if (program.created == 0.0) program.created = now_seconds();
  program.migrated = false;
  program.features.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  if (request_id >= 0) {
    auto it = pending_.find(request_id);
    KS_REQUIRE(it != pending_.end(),
               "tell: request id " << request_id << " is not open (unknown, already told or cancelled)");
    const Request& req = it->second;
    KS_REQUIRE(program.island < 0 || program.island == req.island,
               "tell: program.island " << program.island << " differs from request " << request_id
                                       << "'s island " << req.island);
    program.island = req.island;
    if (program.parent_id < 0) program.parent_id = req.parent.id;
    if (program.iteration == 0) program.iteration = req.iteration;
  } else {
    if (program.island < 0) {
      auto parent = programs_.find(program.parent_id);
      program.island = parent != programs_.end() ? parent->second->island : 0;
    }
    KS_REQUIRE(program.island < config_.num_islands,
               "tell: island must be in [0, " << config_.num_islands << "), got " << program.island);
    if (program.iteration == 0) program.iteration = asks_;
  }
  if (program.id < 0) {
    program.id = next_program_id_++;
  } else {
    KS_REQUIRE(!programs_.count(program.id), "tell: program id " << program.id << " is already used");
    next_program_id_ = std::max(next_program_id_, program.id + 1);
  }
  if (request_id >= 0) {
    const int isl = pending_.at(request_id).island;
    pending_.erase(request_id);
    --in_flight_[static_cast<std::size_t>(isl)];
    reissue_.erase(std::remove(reissue_.begin(), reissue_.end(), request_id), reissue_.end());
  }
  ++tells_;
  return insert_locked(std::make_shared<Program>(std::move(program)), true);
}

std::int64_t Engine::next_program_id() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_program_id_;
}

void Engine::cancel(std::int64_t request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(request_id);
  KS_REQUIRE(it != pending_.end(), "cancel: request id " << request_id << " is not open");
  --in_flight_[static_cast<std::size_t>(it->second.island)];
  pending_.erase(it);
  reissue_.erase(std::remove(reissue_.begin(), reissue_.end(), request_id), reissue_.end());
}

bool Engine::seen(const std::string& source) const {
  const std::uint64_t h = normalized_hash(source);
  std::lock_guard<std::mutex> lock(mutex_);
  return seen_.count(h) > 0;
}

void Engine::mark_seen(const std::string& source) {
  const std::uint64_t h = normalized_hash(source);
  std::lock_guard<std::mutex> lock(mutex_);
  seen_.insert(h);
}

std::optional<std::string> Engine::should_stop() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (config_.max_iterations > 0 && tells_ >= config_.max_iterations) return std::string("max_iterations");
  if (config_.target_score && best_id_ >= 0 && best_score_ >= *config_.target_score)
    return std::string("target_score");
  if (config_.patience > 0 && tells_ - last_improvement_tell_ >= config_.patience)
    return std::string("patience");
  return std::nullopt;
}

std::optional<Program> Engine::best() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = programs_.find(best_id_);
  if (it == programs_.end()) return std::nullopt;
  return *it->second;
}

std::optional<Program> Engine::program(std::int64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = programs_.find(id);
  if (it == programs_.end()) return std::nullopt;
  return *it->second;
}

std::vector<Program> Engine::programs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Program> out;
  out.reserve(programs_.size());
  for (const auto& [id, p] : programs_) out.push_back(*p);
  std::sort(out.begin(), out.end(), [](const Program& a, const Program& b) { return a.id < b.id; });
  return out;
}

std::vector<Program> Engine::elites(int island, std::size_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  KS_REQUIRE(island >= -1 && island < config_.num_islands,
             "island must be -1 (all) or in [0, " << config_.num_islands << "), got " << island);
  std::vector<ProgramPtr> all;
  for (int i = 0; i < config_.num_islands; ++i) {
    if (island >= 0 && i != island) continue;
    auto e = islands_[static_cast<std::size_t>(i)].elites(n);
    all.insert(all.end(), e.begin(), e.end());
  }
  std::sort(all.begin(), all.end(), [](const ProgramPtr& a, const ProgramPtr& b) {
    return a->score() != b->score() ? a->score() > b->score() : a->id < b->id;
  });
  if (all.size() > n) all.resize(n);
  std::vector<Program> out;
  for (const auto& p : all) out.push_back(*p);
  return out;
}

std::vector<std::pair<std::vector<int>, Program>> Engine::archive_cells(int island) const {
  std::lock_guard<std::mutex> lock(mutex_);
  KS_REQUIRE(island >= 0 && island < config_.num_islands,
             "island must be in [0, " << config_.num_islands << "), got " << island);
  std::vector<std::pair<std::vector<int>, Program>> out;
  for (const auto& [coords, p] : islands_[static_cast<std::size_t>(island)].cells())
    out.emplace_back(coords, *p);
  return out;
}

std::vector<Request> Engine::pending_requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Request> out;
  for (const auto& [id, r] : pending_) out.push_back(r);
  return out;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s;
  s.asks = asks_;
  s.tells = tells_;
  s.migrations = migrations_;
  s.migrants = migrants_;
  s.repairs = repairs_;
  s.programs = static_cast<std::int64_t>(programs_.size());
  s.in_flight = static_cast<std::int64_t>(pending_.size());
  s.evictions = evictions_;
  s.duplicates = duplicates_;
  s.best_id = best_id_;
  s.best_score = best_score_;
  for (std::size_t i = 0; i < islands_.size(); ++i) {
    s.island_population.push_back(static_cast<std::int64_t>(islands_[i].size()));
    s.island_cells.push_back(static_cast<std::int64_t>(islands_[i].num_cells()));
    s.island_failures.push_back(static_cast<std::int64_t>(islands_[i].failures().size()));
    s.island_in_flight.push_back(in_flight_[i]);
  }
  return s;
}

nlohmann::json Engine::state_to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream rng;
  rng << rng_;
  std::vector<std::int64_t> ids;
  ids.reserve(programs_.size());
  for (const auto& [id, p] : programs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  nlohmann::json programs = nlohmann::json::array();
  for (std::int64_t id : ids) programs.push_back(program_to_json(*programs_.at(id)));
  nlohmann::json islands = nlohmann::json::array();
  for (const auto& a : islands_) islands.push_back(a.state_to_json());
  nlohmann::json pending = nlohmann::json::array();
  for (const auto& [id, r] : pending_) pending.push_back(request_to_json(r));
  std::vector<std::uint64_t> seen(seen_.begin(), seen_.end());
  std::sort(seen.begin(), seen.end());
  return {{"config", config_.to_json()},
          {"seed", seed_},
          {"rng", rng.str()},
          {"counters",
           {{"next_program_id", next_program_id_},
            {"next_request_id", next_request_id_},
            {"asks", asks_},
            {"tells", tells_},
            {"migrations", migrations_},
            {"migrants", migrants_},
            {"repairs", repairs_},
            {"evictions", evictions_},
            {"duplicates", duplicates_},
            {"round_robin", round_robin_},
            {"last_improvement_tell", last_improvement_tell_},
            {"best_id", best_id_},
            {"best_score", best_score_}}},
          {"programs", programs},
          {"islands", islands},
          {"in_flight", in_flight_},
          {"pending", pending},
          {"seen", seen}};
}

std::unique_ptr<Engine> Engine::from_state(const nlohmann::json& state) {
  auto engine = std::make_unique<Engine>(EngineConfig::from_json(state.at("config")),
                                         state.at("seed").get<std::uint64_t>());
  Engine& e = *engine;
  std::istringstream rng(state.at("rng").get<std::string>());
  rng >> e.rng_;
  KS_REQUIRE(!rng.fail(), "rng state is malformed");
  const auto& c = state.at("counters");
  e.next_program_id_ = c.at("next_program_id").get<std::int64_t>();
  e.next_request_id_ = c.at("next_request_id").get<std::int64_t>();
  e.asks_ = c.at("asks").get<std::int64_t>();
  e.tells_ = c.at("tells").get<std::int64_t>();
  e.migrations_ = c.at("migrations").get<std::int64_t>();
  e.migrants_ = c.at("migrants").get<std::int64_t>();
  e.repairs_ = c.at("repairs").get<std::int64_t>();
  e.evictions_ = c.at("evictions").get<std::int64_t>();
  e.duplicates_ = c.at("duplicates").get<std::int64_t>();
  e.round_robin_ = c.at("round_robin").get<std::int64_t>();
  e.last_improvement_tell_ = c.at("last_improvement_tell").get<std::int64_t>();
  e.best_id_ = c.at("best_id").get<std::int64_t>();
  e.best_score_ = c.at("best_score").get<double>();
  for (const auto& pj : state.at("programs")) {
    auto p = std::make_shared<Program>(program_from_json(pj));
    KS_REQUIRE(p->island >= 0 && p->island < e.config_.num_islands,
               "program " << p->id << " has island " << p->island);
    KS_REQUIRE(!e.programs_.count(p->id), "program id " << p->id << " appears twice");
    if (p->status == Status::Correct) {
      KS_REQUIRE(p->features.size() == e.dims_.size() && p->feature_values.size() == e.dims_.size(),
                 "program " << p->id << " has features of the wrong size");
      for (std::size_t d = 0; d < e.dims_.size(); ++d)
        KS_REQUIRE(p->features[d] >= 0 && p->features[d] < e.dims_[d].bins,
                   "program " << p->id << " has an out-of-range feature coordinate");
    }
    e.programs_[p->id] = p;
  }
  const auto& islands = state.at("islands");
  KS_REQUIRE(islands.size() == e.islands_.size(),
             "checkpoint has " << islands.size() << " islands, config " << e.islands_.size());
  auto lookup = [&e](std::int64_t id) {
    auto it = e.programs_.find(id);
    KS_REQUIRE(it != e.programs_.end(), "archive refers to missing program " << id);
    return it->second;
  };
  for (std::size_t i = 0; i < islands.size(); ++i) e.islands_[i].state_from_json(islands[i], lookup);
  e.in_flight_ = state.at("in_flight").get<std::vector<int>>();
  KS_REQUIRE(e.in_flight_.size() == e.islands_.size(), "in_flight has the wrong size");
  for (const auto& rj : state.at("pending")) {
    Request r = request_from_json(rj);
    e.reissue_.push_back(r.id);
    e.pending_.emplace(r.id, std::move(r));
  }
  for (const auto& h : state.at("seen")) e.seen_.insert(h.get<std::uint64_t>());
  return engine;
}

}  // namespace kernelsmith
