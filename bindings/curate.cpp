// Placeholder: the curation subsystem's bindings (MinHash/LSH) are added with its C++ code.
#include "common.hpp"

namespace kernelsmith::bindings {

void init_curate(py::module_& /*m*/) {}

}  // namespace kernelsmith::bindings
