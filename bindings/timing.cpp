// Placeholder: the timing subsystem's bindings are added with its C++ code.
#include "common.hpp"

namespace kernelsmith::bindings {

void init_timing(py::module_& /*m*/) {}

}  // namespace kernelsmith::bindings
