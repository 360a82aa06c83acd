#include <cmath>
#include <set>
#include <sstream>

#include "kernelsmith/engine/engine.hpp"
#include "kernelsmith/error.hpp"

namespace kernelsmith {

namespace {

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> keys = {"num_islands",
                                                "feature_dimensions",
                                                "feature_bins",
                                                "feature_ranges",
                                                "metrics",
                                                "population_size",
                                                "elite_size",
                                                "num_inspirations",
                                                "inspiration_elites",
                                                "inspiration_neighbours",
                                                "exploration_ratio",
                                                "exploitation_ratio",
                                                "weighted_ratio",
                                                "power_law_alpha",
                                                "repair_ratio",
                                                "recent_failures",
                                                "migration_interval",
                                                "migration_rate",
                                                "migration_topology",
                                                "island_selection",
                                                "max_iterations",
                                                "target_score",
                                                "patience",
                                                "keep_checkpoints"};
  return keys;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

template <typename T>
T get_number(const nlohmann::json& json, const std::string& key) {
  const auto& v = json.at(key);
  if constexpr (std::is_integral_v<T>) {
    bool integral = v.is_number_integer() ||
                    (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    KS_REQUIRE(integral && !v.is_boolean(),
               "config key '" << key << "' must be an integer, got " << v.dump());
    return static_cast<T>(v.get<double>());
  } else {
    KS_REQUIRE(v.is_number() && !v.is_boolean(),
               "config key '" << key << "' must be a number, got " << v.dump());
    return v.get<T>();
  }
}

std::string get_string(const nlohmann::json& json, const std::string& key) {
  const auto& v = json.at(key);
  KS_REQUIRE(v.is_string(), "config key '" << key << "' must be a string, got " << v.dump());
  return v.get<std::string>();
}

std::vector<std::string> get_strings(const nlohmann::json& json, const std::string& key) {
  const auto& v = json.at(key);
  KS_REQUIRE(v.is_array(), "config key '" << key << "' must be a list of strings, got " << v.dump());
  std::vector<std::string> out;
  for (const auto& item : v) {
    KS_REQUIRE(item.is_string(),
               "config key '" << key << "' must be a list of strings, got element " << item.dump());
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace

EngineConfig EngineConfig::from_json(const nlohmann::json& json) {
  KS_REQUIRE(json.is_object(), "engine config must be a JSON object, got " << json.type_name());
  const auto& keys = config_keys();
  for (const auto& item : json.items()) {
    bool known = false;
    for (const auto& k : keys) known = known || k == item.key();
    KS_REQUIRE(known, "unknown config key '" << item.key() << "'; allowed keys: " << join(keys));
  }
  EngineConfig c;
  auto has = [&](const char* key) { return json.contains(key) && !json.at(key).is_null(); };
  if (has("num_islands")) c.num_islands = get_number<int>(json, "num_islands");
  if (has("feature_dimensions")) c.feature_dimensions = get_strings(json, "feature_dimensions");
  if (has("metrics")) c.metrics = get_strings(json, "metrics");
  if (has("feature_bins")) {
    const auto& v = json.at("feature_bins");
    if (v.is_object()) {
      for (const auto& [name, bins] : v.items()) {
        KS_REQUIRE(bins.is_number_integer(),
                   "config key 'feature_bins." << name << "' must be an integer, got " << bins.dump());
        c.feature_bins[name] = bins.get<int>();
      }
    } else {
      c.default_bins = get_number<int>(json, "feature_bins");
    }
  }
  if (has("feature_ranges")) {
    const auto& v = json.at("feature_ranges");
    KS_REQUIRE(v.is_object(),
               "config key 'feature_ranges' must map a dimension to [lo, hi], got " << v.dump());
    for (const auto& [name, range] : v.items()) {
      KS_REQUIRE(range.is_array() && range.size() == 2 && range[0].is_number() && range[1].is_number(),
                 "config key 'feature_ranges." << name << "' must be [lo, hi], got " << range.dump());
      c.feature_ranges[name] = {range[0].get<double>(), range[1].get<double>()};
    }
  }
  if (has("population_size")) c.population_size = get_number<int>(json, "population_size");
  if (has("elite_size")) c.elite_size = get_number<int>(json, "elite_size");
  if (has("num_inspirations")) c.num_inspirations = get_number<int>(json, "num_inspirations");
  if (has("inspiration_elites")) c.inspiration_elites = get_number<int>(json, "inspiration_elites");
  if (has("inspiration_neighbours"))
    c.inspiration_neighbours = get_number<int>(json, "inspiration_neighbours");
  if (has("exploration_ratio")) c.exploration_ratio = get_number<double>(json, "exploration_ratio");
  if (has("exploitation_ratio")) c.exploitation_ratio = get_number<double>(json, "exploitation_ratio");
  if (has("weighted_ratio")) c.weighted_ratio = get_number<double>(json, "weighted_ratio");
  if (has("power_law_alpha")) c.power_law_alpha = get_number<double>(json, "power_law_alpha");
  if (has("repair_ratio")) c.repair_ratio = get_number<double>(json, "repair_ratio");
  if (has("recent_failures")) c.recent_failures = get_number<int>(json, "recent_failures");
  if (has("migration_interval")) c.migration_interval = get_number<int>(json, "migration_interval");
  if (has("migration_rate")) c.migration_rate = get_number<double>(json, "migration_rate");
  if (has("migration_topology")) c.migration_topology = get_string(json, "migration_topology");
  if (has("island_selection")) c.island_selection = get_string(json, "island_selection");
  if (has("max_iterations")) c.max_iterations = get_number<std::int64_t>(json, "max_iterations");
  if (has("target_score")) c.target_score = get_number<double>(json, "target_score");
  if (has("patience")) c.patience = get_number<std::int64_t>(json, "patience");
  if (has("keep_checkpoints")) c.keep_checkpoints = get_number<int>(json, "keep_checkpoints");
  c.validate();
  return c;
}

nlohmann::json EngineConfig::to_json() const {
  nlohmann::json bins = nlohmann::json::object();
  for (const auto& d : dims()) bins[d.name] = d.bins;
  nlohmann::json ranges = nlohmann::json::object();
  for (const auto& [name, r] : feature_ranges) ranges[name] = {r.first, r.second};
  nlohmann::json j = {{"num_islands", num_islands},
                      {"feature_dimensions", feature_dimensions},
                      {"feature_bins", bins},
                      {"feature_ranges", ranges},
                      {"metrics", metrics},
                      {"population_size", population_size},
                      {"elite_size", elite_size},
                      {"num_inspirations", num_inspirations},
                      {"inspiration_elites", inspiration_elites},
                      {"inspiration_neighbours", inspiration_neighbours},
                      {"exploration_ratio", exploration_ratio},
                      {"exploitation_ratio", exploitation_ratio},
                      {"weighted_ratio", weighted_ratio},
                      {"power_law_alpha", power_law_alpha},
                      {"repair_ratio", repair_ratio},
                      {"recent_failures", recent_failures},
                      {"migration_interval", migration_interval},
                      {"migration_rate", migration_rate},
                      {"migration_topology", migration_topology},
                      {"island_selection", island_selection},
                      {"max_iterations", max_iterations},
                      {"target_score", nullptr},
                      {"patience", patience},
                      {"keep_checkpoints", keep_checkpoints}};
  if (target_score) j["target_score"] = *target_score;
  return j;
}

void EngineConfig::validate() const {
  KS_REQUIRE(num_islands >= 1, "config key 'num_islands' must be >= 1, got " << num_islands);
  std::vector<std::string> allowed = {"complexity", "score"};
  for (const auto& m : metrics) {
    KS_REQUIRE(!m.empty(), "config key 'metrics' holds an empty name");
    allowed.push_back(m);
  }
  std::set<std::string> used;
  for (const auto& name : feature_dimensions) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == name;
    KS_REQUIRE(ok, "config key 'feature_dimensions': unknown feature '"
                       << name << "'; allowed: " << join(allowed)
                       << " (declare other metric names under 'metrics')");
    KS_REQUIRE(used.insert(name).second, "config key 'feature_dimensions' lists '" << name << "' twice");
  }
  KS_REQUIRE(default_bins >= 1, "config key 'feature_bins' must be >= 1, got " << default_bins);
  for (const auto& [name, bins] : feature_bins) {
    KS_REQUIRE(used.count(name),
               "config key 'feature_bins."
                   << name << "' names no feature dimension; dimensions: " << join(feature_dimensions));
    KS_REQUIRE(bins >= 1, "config key 'feature_bins." << name << "' must be >= 1, got " << bins);
  }
  double cells = 1.0;
  for (const auto& d : dims()) cells *= d.bins;
  KS_REQUIRE(cells <= 1e15,
             "config key 'feature_bins': the grid has " << cells << " cells; at most 1e15 are allowed");
  for (const auto& [name, r] : feature_ranges) {
    KS_REQUIRE(used.count(name),
               "config key 'feature_ranges."
                   << name << "' names no feature dimension; dimensions: " << join(feature_dimensions));
    KS_REQUIRE(std::isfinite(r.first) && std::isfinite(r.second) && r.first < r.second,
               "config key 'feature_ranges." << name << "' must be [lo, hi] with lo < hi, got [" << r.first
                                             << ", " << r.second << "]");
  }
  KS_REQUIRE(population_size >= 1, "config key 'population_size' must be >= 1, got " << population_size);
  KS_REQUIRE(elite_size >= 0, "config key 'elite_size' must be >= 0, got " << elite_size);
  KS_REQUIRE(num_inspirations >= 0, "config key 'num_inspirations' must be >= 0, got " << num_inspirations);
  KS_REQUIRE(inspiration_elites >= 0,
             "config key 'inspiration_elites' must be >= 0, got " << inspiration_elites);
  KS_REQUIRE(inspiration_neighbours >= 0,
             "config key 'inspiration_neighbours' must be >= 0, got " << inspiration_neighbours);
  auto ratio = [](const char* key, double v) {
    KS_REQUIRE(v >= 0.0 && v <= 1.0, "config key '" << key << "' must be in [0, 1], got " << v);
  };
  ratio("exploration_ratio", exploration_ratio);
  ratio("exploitation_ratio", exploitation_ratio);
  ratio("weighted_ratio", weighted_ratio);
  ratio("repair_ratio", repair_ratio);
  ratio("migration_rate", migration_rate);
  KS_REQUIRE(exploration_ratio + exploitation_ratio + weighted_ratio > 0.0,
             "config keys 'exploration_ratio', 'exploitation_ratio', 'weighted_ratio' must not all be 0");
  KS_REQUIRE(std::isfinite(power_law_alpha) && power_law_alpha >= 0.0,
             "config key 'power_law_alpha' must be >= 0, got " << power_law_alpha);
  KS_REQUIRE(recent_failures >= 0, "config key 'recent_failures' must be >= 0, got " << recent_failures);
  KS_REQUIRE(migration_interval >= 0,
             "config key 'migration_interval' must be >= 0 (0 disables migration), got "
                 << migration_interval);
  KS_REQUIRE(migration_topology == "ring" || migration_topology == "all",
             "config key 'migration_topology' must be one of: ring, all; got '" << migration_topology << "'");
  KS_REQUIRE(island_selection == "round_robin" || island_selection == "least_loaded",
             "config key 'island_selection' must be one of: round_robin, least_loaded; got '"
                 << island_selection << "'");
  KS_REQUIRE(max_iterations >= 0,
             "config key 'max_iterations' must be >= 0 (0: no limit), got " << max_iterations);
  KS_REQUIRE(!target_score || std::isfinite(*target_score),
             "config key 'target_score' must be a finite number or null");
  KS_REQUIRE(patience >= 0, "config key 'patience' must be >= 0 (0: no limit), got " << patience);
  KS_REQUIRE(keep_checkpoints >= 1, "config key 'keep_checkpoints' must be >= 1, got " << keep_checkpoints);
}

std::vector<FeatureDim> EngineConfig::dims() const {
  std::vector<FeatureDim> out;
  for (const auto& name : feature_dimensions) {
    FeatureDim d;
    d.name = name;
    auto b = feature_bins.find(name);
    d.bins = b == feature_bins.end() ? default_bins : b->second;
    auto r = feature_ranges.find(name);
    if (r != feature_ranges.end()) {
      d.fixed = true;
      d.lo = r->second.first;
      d.hi = r->second.second;
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace kernelsmith
