// Placeholder: the engine subsystem's bindings are added with its C++ code.
#include "common.hpp"

namespace kernelsmith::bindings {

void init_engine(py::module_& /*m*/) {}

}  // namespace kernelsmith::bindings
