#include "kernelsmith/engine/program.hpp"

#include <cmath>
#include <limits>

#include "kernelsmith/error.hpp"

namespace kernelsmith {

namespace {
struct StatusEntry {
  Status status;
  const char* name;
};
constexpr StatusEntry kStatuses[] = {
    {Status::Pending, "pending"},
    {Status::EditFailed, "edit-failed"},
    {Status::CompileFailed, "compile-failed"},
    {Status::Incorrect, "incorrect"},
    {Status::Hacked, "hacked"},
    {Status::Correct, "correct"},
};

nlohmann::json number_to_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from_json(const nlohmann::json& j, const std::string& what) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  KS_THROW(InvalidArgument, what << " must be a number, got " << j.dump());
}
}  // namespace

const char* status_name(Status status) {
  for (const auto& e : kStatuses)
    if (e.status == status) return e.name;
  return "pending";
}

const char* status_names() { return "pending, edit-failed, compile-failed, incorrect, hacked, correct"; }

Status parse_status(const std::string& name) {
  for (const auto& e : kStatuses)
    if (name == e.name) return e.status;
  KS_THROW(InvalidArgument, "status: unknown value '" << name << "'; allowed: " << status_names());
}

double Program::score() const {
  auto it = metrics.find("score");
  return it == metrics.end() ? -std::numeric_limits<double>::infinity() : it->second;
}

nlohmann::json program_to_json(const Program& p) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [k, v] : p.metrics) metrics[k] = number_to_json(v);
  nlohmann::json values = nlohmann::json::array();
  for (double v : p.feature_values) values.push_back(number_to_json(v));
  return nlohmann::json{{"id", p.id},
                        {"source", p.source},
                        {"parent_id", p.parent_id},
                        {"island", p.island},
                        {"iteration", p.iteration},
                        {"metrics", metrics},
                        {"features", p.features},
                        {"status", status_name(p.status)},
                        {"feedback", p.feedback},
                        {"created", p.created},
                        {"migrated_from", p.migrated_from},
                        {"feature_values", values},
                        {"migrated", p.migrated},
                        {"code_hash", p.code_hash}};
}

Program program_from_json(const nlohmann::json& j) {
  KS_REQUIRE(j.is_object(), "program must be a JSON object, got " << j.type_name());
  Program p;
  try {
    if (j.contains("id")) p.id = j.at("id").get<std::int64_t>();
    p.source = j.at("source").get<std::string>();
    if (j.contains("parent_id")) p.parent_id = j.at("parent_id").get<std::int64_t>();
    if (j.contains("island")) p.island = j.at("island").get<int>();
    if (j.contains("iteration")) p.iteration = j.at("iteration").get<std::int64_t>();
    if (j.contains("metrics"))
      for (const auto& [k, v] : j.at("metrics").items()) p.metrics[k] = number_from_json(v, "metrics." + k);
    if (j.contains("features")) p.features = j.at("features").get<std::vector<int>>();
    if (j.contains("status")) p.status = parse_status(j.at("status").get<std::string>());
    if (j.contains("feedback")) p.feedback = j.at("feedback");
    if (j.contains("created")) p.created = j.at("created").get<double>();
    if (j.contains("migrated_from")) p.migrated_from = j.at("migrated_from").get<std::int64_t>();
    if (j.contains("feature_values"))
      for (const auto& v : j.at("feature_values"))
        p.feature_values.push_back(number_from_json(v, "feature_values"));
    if (j.contains("migrated")) p.migrated = j.at("migrated").get<bool>();
    if (j.contains("code_hash")) p.code_hash = j.at("code_hash").get<std::uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    KS_THROW(InvalidArgument, "malformed program record: " << e.what());
  }
  return p;
}

}  // namespace kernelsmith
