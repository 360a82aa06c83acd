// Bindings for the evolution engine. Records (Program, Request) are plain
// Python dataclasses defined in kernelsmith/engine.py and registered here, so
// Python code gets ordinary mutable dicts for metrics and feedback; this file
// only converts between them and the C++ structs, and releases the GIL around
// every call that takes the engine lock.
#include <pybind11/stl.h>

#include <optional>

#include "common.hpp"
#include "kernelsmith/engine/engine.hpp"
#include "kernelsmith/error.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace kernelsmith::bindings {

namespace {

// Set once by kernelsmith.engine at import; never freed (module lifetime).
PyObject* g_program_type = nullptr;
PyObject* g_request_type = nullptr;

py::object json_to_py(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::json::value_t::string: return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list out;
      for (const auto& item : j) out.append(json_to_py(item));
      return std::move(out);
    }
    case nlohmann::json::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : j.items()) out[py::str(k)] = json_to_py(v);
      return std::move(out);
    }
    default: return py::none();
  }
}

nlohmann::json py_to_json(py::handle o, const std::string& where) {
  if (o.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(o)) return o.cast<bool>();
  if (py::isinstance<py::int_>(o)) return o.cast<std::int64_t>();
  if (py::isinstance<py::float_>(o)) return o.cast<double>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  if (py::isinstance<py::dict>(o)) {
    nlohmann::json out = nlohmann::json::object();
    for (auto item : o.cast<py::dict>()) {
      KS_REQUIRE(py::isinstance<py::str>(item.first), where << ": keys must be strings");
      out[item.first.cast<std::string>()] = py_to_json(item.second, where);
    }
    return out;
  }
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    nlohmann::json out = nlohmann::json::array();
    for (auto item : o) out.push_back(py_to_json(item, where));
    return out;
  }
  // numpy scalars and other numbers
  if (py::hasattr(o, "__float__") && !py::hasattr(o, "__len__")) return o.cast<double>();
  KS_THROW(InvalidArgument, where << ": value of type "
                                  << std::string(py::str(py::type::of(o).attr("__name__")))
                                  << " is not JSON-serializable");
}

Program program_from_py(py::handle o) {
  Program p;
  p.source = o.attr("source").cast<std::string>();
  p.id = o.attr("id").cast<std::int64_t>();
  p.parent_id = o.attr("parent_id").cast<std::int64_t>();
  p.island = o.attr("island").cast<int>();
  p.iteration = o.attr("iteration").cast<std::int64_t>();
  py::object metrics = o.attr("metrics");
  for (auto item : metrics.cast<py::dict>()) {
    p.metrics[item.first.cast<std::string>()] = item.second.cast<double>();
  }
  p.status = parse_status(o.attr("status").cast<std::string>());
  p.feedback = py_to_json(o.attr("feedback"), "Program.feedback");
  KS_REQUIRE(p.feedback.is_object(), "Program.feedback must be a dict");
  p.created = o.attr("created").cast<double>();
  p.migrated_from = o.attr("migrated_from").cast<std::int64_t>();
  return p;
}

py::object program_to_py(const Program& p) {
  py::dict metrics;
  for (const auto& [k, v] : p.metrics) metrics[py::str(k)] = v;
  py::list features;
  for (int f : p.features) features.append(f);
  py::handle cls(g_program_type);
  return cls(py::arg("source") = p.source, py::arg("id") = p.id, py::arg("parent_id") = p.parent_id,
             py::arg("island") = p.island, py::arg("iteration") = p.iteration, py::arg("metrics") = metrics,
             py::arg("status") = status_name(p.status), py::arg("feedback") = json_to_py(p.feedback),
             py::arg("features") = features, py::arg("created") = p.created,
             py::arg("migrated_from") = p.migrated_from, py::arg("migrated") = p.migrated);
}

py::object request_to_py(const Request& r) {
  py::list inspirations;
  for (const auto& p : r.inspirations) inspirations.append(program_to_py(p));
  py::handle cls(g_request_type);
  return cls(py::arg("id") = r.id, py::arg("island") = r.island, py::arg("parent") = program_to_py(r.parent),
             py::arg("inspirations") = inspirations, py::arg("mode") = r.mode,
             py::arg("iteration") = r.iteration);
}

void require_types() {
  KS_REQUIRE(g_program_type && g_request_type,
             "kernelsmith._core engine records are not registered; import kernelsmith.engine");
}

py::dict stats_to_py(const EngineStats& s) {
  py::dict d;
  d["asks"] = s.asks;
  d["tells"] = s.tells;
  d["migrations"] = s.migrations;
  d["migrants"] = s.migrants;
  d["repairs"] = s.repairs;
  d["programs"] = s.programs;
  d["in_flight"] = s.in_flight;
  d["evictions"] = s.evictions;
  d["duplicates"] = s.duplicates;
  d["best_id"] = s.best_id;
  d["best_score"] = s.best_id >= 0 ? py::object(py::float_(s.best_score)) : py::object(py::none());
  d["island_population"] = s.island_population;
  d["island_cells"] = s.island_cells;
  d["island_failures"] = s.island_failures;
  d["island_in_flight"] = s.island_in_flight;
  return d;
}

using Release = py::gil_scoped_release;

}  // namespace

void init_engine(py::module_& m) {
  m.def(
      "_register_engine_records",
      [](py::object program_type, py::object request_type) {
        g_program_type = program_type.release().ptr();
        g_request_type = request_type.release().ptr();
      },
      "Called by kernelsmith.engine with its Program and Request dataclasses.");
  m.def("normalize_source", &normalize_source, py::arg("source"),
        "Source with comments, blank lines and spacing runs removed (indentation and strings kept).");
  m.def("normalized_hash", &normalized_hash, py::arg("source"),
        "64-bit FNV-1a hash of normalize_source(source).");
  m.def("complexity", &complexity, py::arg("source"), "Structural complexity of Python-like source.");
  m.def(
      "code_stats",
      [](const std::string& source) {
        const CodeStats s = code_stats(source);
        py::dict d;
        d["lines"] = s.lines;
        d["statements"] = s.statements;
        d["branches"] = s.branches;
        d["loops"] = s.loops;
        d["calls"] = s.calls;
        d["functions"] = s.functions;
        d["max_nesting"] = s.max_nesting;
        d["tokens"] = s.tokens;
        return d;
      },
      py::arg("source"), "Token counts behind complexity().");
  m.def(
      "validate_engine_config",
      [](const std::string& json_text) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(json_text);
        } catch (const nlohmann::json::exception& e) {
          KS_THROW(InvalidArgument, "engine config is not valid JSON: " << e.what());
        }
        return EngineConfig::from_json(j).to_json().dump();
      },
      py::arg("config_json"), "Validated engine config with every default filled in (JSON text).");

  py::class_<Engine>(m, "_Engine")
      .def(py::init([](const std::string& json_text, std::uint64_t seed) {
             nlohmann::json j;
             try {
               j = nlohmann::json::parse(json_text);
             } catch (const nlohmann::json::exception& e) {
               KS_THROW(InvalidArgument, "engine config is not valid JSON: " << e.what());
             }
             return std::make_unique<Engine>(EngineConfig::from_json(j), seed);
           }),
           py::arg("config_json"), py::arg("seed") = 0)
      .def("add_seed",
           [](Engine& e, py::handle program) {
             Program p = program_from_py(program);
             Release release;
             return e.add_seed(std::move(p));
           })
      .def("ask",
           [](Engine& e) {
             require_types();
             Request r;
             {
               Release release;
               r = e.ask();
             }
             return request_to_py(r);
           })
      .def(
          "tell",
          [](Engine& e, py::handle program, std::int64_t request_id) {
            Program p = program_from_py(program);
            TellResult t;
            {
              Release release;
              t = e.tell(std::move(p), request_id);
            }
            return py::make_tuple(t.id, t.inserted, t.owns_cell, t.new_best);
          },
          py::arg("program"), py::arg("request_id") = -1)
      .def("cancel", &Engine::cancel, py::arg("request_id"), py::call_guard<Release>())
      .def("seen", &Engine::seen, py::arg("source"), py::call_guard<Release>())
      .def("mark_seen", &Engine::mark_seen, py::arg("source"), py::call_guard<Release>())
      .def("should_stop", &Engine::should_stop, py::call_guard<Release>())
      .def("best",
           [](const Engine& e) -> py::object {
             require_types();
             std::optional<Program> p;
             {
               Release release;
               p = e.best();
             }
             return p ? program_to_py(*p) : py::none();
           })
      .def("program",
           [](const Engine& e, std::int64_t id) -> py::object {
             require_types();
             std::optional<Program> p;
             {
               Release release;
               p = e.program(id);
             }
             return p ? program_to_py(*p) : py::none();
           })
      .def("programs",
           [](const Engine& e) {
             require_types();
             std::vector<Program> all;
             {
               Release release;
               all = e.programs();
             }
             py::list out;
             for (const auto& p : all) out.append(program_to_py(p));
             return out;
           })
      .def("elites",
           [](const Engine& e, int island, std::size_t n) {
             require_types();
             std::vector<Program> all;
             {
               Release release;
               all = e.elites(island, n);
             }
             py::list out;
             for (const auto& p : all) out.append(program_to_py(p));
             return out;
           })
      .def("archive_cells",
           [](const Engine& e, int island) {
             require_types();
             std::vector<std::pair<std::vector<int>, Program>> cells;
             {
               Release release;
               cells = e.archive_cells(island);
             }
             py::list out;
             for (const auto& [coords, p] : cells)
               out.append(py::make_tuple(py::tuple(py::cast(coords)), program_to_py(p)));
             return out;
           })
      .def("pending_requests",
           [](const Engine& e) {
             require_types();
             std::vector<Request> all;
             {
               Release release;
               all = e.pending_requests();
             }
             py::list out;
             for (const auto& r : all) out.append(request_to_py(r));
             return out;
           })
      .def("stats",
           [](const Engine& e) {
             EngineStats s;
             {
               Release release;
               s = e.stats();
             }
             return stats_to_py(s);
           })
      .def("config_json", [](const Engine& e) { return e.config().to_json().dump(); })
      .def_property_readonly("seed", &Engine::seed)
      .def("next_program_id", &Engine::next_program_id, py::call_guard<py::gil_scoped_release>())
      .def("state_json",
           [](const Engine& e) {
             Release release;
             return e.state_to_json().dump();
           })
      .def("save", &Engine::save, py::arg("dir"), py::call_guard<Release>())
      .def_static("load", &Engine::load, py::arg("path"), py::call_guard<Release>())
      .def_static("list_checkpoints", &Engine::list_checkpoints, py::arg("dir"));
}

}  // namespace kernelsmith::bindings
