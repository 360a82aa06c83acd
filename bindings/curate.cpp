// Bindings for curation's near-duplicate detection (cpp/include/kernelsmith/curate/minhash.hpp).
// The Python front end is kernelsmith.curate.dedupe.
#include <pybind11/stl.h>

#include "common.hpp"
#include "kernelsmith/curate/minhash.hpp"

namespace kernelsmith::bindings {

void init_curate(py::module_& m) {
  namespace mh = kernelsmith::minhash;
  using release = py::call_guard<py::gil_scoped_release>;

  m.def("minhash_tokenize", &mh::tokenize, py::arg("source"),
        "Python-like tokens of source (comments and whitespace dropped).");
  m.def("minhash_shingles", &mh::shingle_hashes, py::arg("source"), py::arg("k") = 5,
        "Sorted distinct 64-bit hashes of the k-token shingles of source.");
  m.def("minhash_jaccard", &mh::jaccard, py::arg("a"), py::arg("b"),
        "Exact Jaccard similarity of two sorted unique hash lists.");
  m.def(
      "minhash_signature",
      [](const std::vector<std::uint64_t>& shingles, int num_perm, std::uint64_t seed) {
        return mh::MinHasher(num_perm, seed).signature(shingles);
      },
      py::arg("shingles"), py::arg("num_perm") = 128, py::arg("seed") = 1, release());
  m.def("minhash_estimate", &mh::estimate_jaccard, py::arg("a"), py::arg("b"),
        "Fraction of equal signature positions (estimated Jaccard similarity).");

  py::class_<mh::LSHIndex>(m, "MinHashLSH",
                           "MinHash signatures of token shingles with LSH banding; documents are numbered "
                           "0, 1, ... in insertion order.")
      .def(py::init([](int num_perm, int bands, int shingle, std::uint64_t seed, double threshold) {
             mh::Params p;
             p.num_perm = num_perm;
             p.bands = bands;
             p.shingle = shingle;
             p.seed = seed;
             p.threshold = threshold;
             return new mh::LSHIndex(p);
           }),
           py::arg("num_perm") = 128, py::arg("bands") = 32, py::arg("shingle") = 5, py::arg("seed") = 1,
           py::arg("threshold") = 0.8)
      .def_property_readonly("num_perm", [](const mh::LSHIndex& x) { return x.params().num_perm; })
      .def_property_readonly("bands", [](const mh::LSHIndex& x) { return x.params().bands; })
      .def_property_readonly("shingle", [](const mh::LSHIndex& x) { return x.params().shingle; })
      .def_property_readonly("threshold", [](const mh::LSHIndex& x) { return x.params().threshold; })
      .def("__len__", &mh::LSHIndex::size)
      .def("add", &mh::LSHIndex::add, py::arg("source"), release(), "Insert one document; returns its id.")
      .def(
          "add_many",
          [](mh::LSHIndex& self, const std::vector<std::string>& sources, int threads) {
            // Chunks keep Ctrl-C responsive on very large corpora.
            const std::size_t first = self.size();
            const std::size_t chunk = 4096;
            for (std::size_t i = 0; i < sources.size(); i += chunk) {
              std::vector<std::string> part(sources.begin() + static_cast<std::ptrdiff_t>(i),
                                            sources.begin() + static_cast<std::ptrdiff_t>(
                                                                  std::min(sources.size(), i + chunk)));
              {
                py::gil_scoped_release nogil;
                self.add_many(part, threads);
              }
              if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            }
            return first;
          },
          py::arg("sources"), py::arg("threads") = 0,
          "Insert many documents (signatures on `threads` threads, 0: all cores); returns the first id.")
      .def("signature", &mh::LSHIndex::signature, py::arg("id"))
      .def("estimate", &mh::LSHIndex::estimate, py::arg("i"), py::arg("j"))
      .def("candidates", &mh::LSHIndex::candidates, py::arg("id"), release())
      .def("query", &mh::LSHIndex::query, py::arg("source"), release())
      .def("near_duplicate_pairs", &mh::LSHIndex::near_duplicate_pairs, release())
      .def("groups", &mh::LSHIndex::groups, release(),
           "For each document, the smallest id of its near-duplicate group.");
}

}  // namespace kernelsmith::bindings
