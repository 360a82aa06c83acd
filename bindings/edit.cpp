// Bindings for the edit subsystem (cpp/include/kernelsmith/edit/edit.hpp). The
// Python front end is kernelsmith.edit; these are the raw pieces.
#include <pybind11/stl.h>

#include "common.hpp"
#include "kernelsmith/edit/edit.hpp"

namespace kernelsmith::bindings {

void init_edit(py::module_& m) {
  using namespace kernelsmith::edit;
  using release = py::call_guard<py::gil_scoped_release>;

  py::class_<EvolveBlock>(m, "EvolveBlock", "An evolvable region; 1-based lines of its marker lines.")
      .def_readonly("start_line", &EvolveBlock::start_line)
      .def_readonly("end_line", &EvolveBlock::end_line)
      .def("__repr__", [](const EvolveBlock& b) {
        return "EvolveBlock(start_line=" + std::to_string(b.start_line) +
               ", end_line=" + std::to_string(b.end_line) + ")";
      });

  py::class_<BlockParse>(m, "BlockParse")
      .def_readonly("ok", &BlockParse::ok)
      .def_readonly("blocks", &BlockParse::blocks)
      .def_readonly("error", &BlockParse::error);

  py::class_<EnforceResult>(m, "EnforceResult")
      .def_readonly("ok", &EnforceResult::ok)
      .def_readonly("error", &EnforceResult::error)
      .def_readonly("parent_line", &EnforceResult::parent_line)
      .def_readonly("child_line", &EnforceResult::child_line);

  py::class_<DiffBlock>(m, "DiffBlock")
      .def(py::init([](std::string search, std::string replace) {
             DiffBlock b;
             b.search = std::move(search);
             b.replace = std::move(replace);
             return b;
           }),
           py::arg("search"), py::arg("replace"))
      .def_readonly("search", &DiffBlock::search)
      .def_readonly("replace", &DiffBlock::replace)
      .def_readonly("response_line", &DiffBlock::response_line)
      .def_readonly("well_formed", &DiffBlock::well_formed)
      .def_readonly("error", &DiffBlock::error);

  py::class_<BlockOutcome>(m, "BlockOutcome")
      .def_readonly("index", &BlockOutcome::index)
      .def_readonly("response_line", &BlockOutcome::response_line)
      .def_readonly("status", &BlockOutcome::status)
      .def_readonly("match_level", &BlockOutcome::match_level)
      .def_readonly("start_line", &BlockOutcome::start_line)
      .def_readonly("end_line", &BlockOutcome::end_line)
      .def_readonly("nearest_start", &BlockOutcome::nearest_start)
      .def_readonly("nearest_end", &BlockOutcome::nearest_end)
      .def_readonly("similarity", &BlockOutcome::similarity)
      .def_readonly("message", &BlockOutcome::message)
      .def_property_readonly("applied", &BlockOutcome::applied);

  py::class_<DiffResult>(m, "DiffResult")
      .def_readonly("source", &DiffResult::source)
      .def_readonly("blocks", &DiffResult::blocks)
      .def_readonly("applied", &DiffResult::applied)
      .def_readonly("failed", &DiffResult::failed);

  py::class_<FencedCode>(m, "FencedCode")
      .def_readonly("found", &FencedCode::found)
      .def_readonly("code", &FencedCode::code)
      .def_readonly("language", &FencedCode::language)
      .def_readonly("index", &FencedCode::index)
      .def_readonly("count", &FencedCode::count)
      .def_readonly("start_line", &FencedCode::start_line)
      .def_readonly("closed", &FencedCode::closed);

  py::class_<EditResult>(m, "EditResultCore")
      .def_readonly("ok", &EditResult::ok)
      .def_readonly("mode", &EditResult::mode)
      .def_readonly("source", &EditResult::source)
      .def_readonly("blocks", &EditResult::blocks)
      .def_readonly("error", &EditResult::error)
      .def_readonly("evolve_blocks", &EditResult::evolve_blocks)
      .def_readonly("fence", &EditResult::fence);

  m.def("parse_evolve_blocks", &parse_evolve_blocks, py::arg("source"), release(),
        "Find EVOLVE-BLOCK markers; malformed markers give ok=False and an error.");
  m.def("check_evolve_blocks", &check_evolve_blocks, py::arg("parent"), py::arg("child"), release(),
        "Check that child differs from parent only inside the parent's EVOLVE blocks.");
  m.def("parse_diff_blocks", &parse_diff_blocks, py::arg("response"), release(),
        "Parse SEARCH/REPLACE blocks from a response.");
  m.def("apply_diff", &apply_diff, py::arg("source"), py::arg("blocks"), release(),
        "Apply SEARCH/REPLACE blocks in order with whitespace-tolerant matching.");
  m.def("extract_fenced_code", &extract_fenced_code, py::arg("response"), release(),
        "Pick the fenced code block that holds the program.");
  m.def("line_similarity", &line_similarity, py::arg("a"), py::arg("b"), release(),
        "Mean Levenshtein ratio of aligned stripped lines, in [0, 1].");
  // The mode is parsed with the GIL held so a bad name raises ValueError
  // before the (possibly long) edit runs without it.
  m.def(
      "apply_edit",
      [](const std::string& parent, const std::string& response, const std::string& mode,
         bool allow_partial) {
        const EditMode parsed = parse_edit_mode(mode);
        py::gil_scoped_release unlocked;
        return apply_edit(parent, response, parsed, allow_partial);
      },
      py::arg("parent"), py::arg("response"), py::arg("mode") = "auto", py::arg("allow_partial") = false,
      "Apply a model response (diff or full rewrite) to parent and enforce its EVOLVE blocks.");
}

}  // namespace kernelsmith::bindings
