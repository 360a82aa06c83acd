// The record of one candidate program and its evaluation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kernelsmith {

// Evaluation outcome. Only Correct programs compete for archive cells;
// the failed ones are kept in a bounded per-island list for repair requests.
enum class Status { Pending, EditFailed, CompileFailed, Incorrect, Hacked, Correct };

// "pending", "edit-failed", "compile-failed", "incorrect", "hacked", "correct".
const char* status_name(Status status);
// Inverse of status_name; InvalidArgument naming the allowed values otherwise.
Status parse_status(const std::string& name);
// Comma-separated list of every status name (for error messages).
const char* status_names();

struct Program {
  std::int64_t id = -1;  // assigned by the engine on tell/seed when -1
  std::string source;
  std::int64_t parent_id = -1;            // -1: no parent (a seed)
  int island = -1;                        // -1: chosen by the engine
  std::int64_t iteration = 0;             // the ask counter value of the request that made it
  std::map<std::string, double> metrics;  // "score" is the fitness, higher is better
  std::vector<int> features;              // grid coordinates, filled by the archive
  Status status = Status::Pending;
  nlohmann::json feedback = nlohmann::json::object();  // evaluator output (errors, timing...)
  double created = 0.0;                                // unix seconds; set by the engine when 0
  std::int64_t migrated_from = -1;                     // id of the program this is a migrant copy of

  // Engine-internal bookkeeping (kept in checkpoints).
  std::vector<double> feature_values;  // raw values behind `features`
  bool migrated = false;               // a copy of it was sent to another island
  std::uint64_t code_hash = 0;         // normalized_hash(source)

  // Fitness; -infinity when the program has no "score" metric.
  double score() const;
};

// Full JSON form (non-finite metric values are written as "nan", "inf", "-inf").
nlohmann::json program_to_json(const Program& program);
// Throws InvalidArgument naming the field on malformed input.
Program program_from_json(const nlohmann::json& json);

}  // namespace kernelsmith
