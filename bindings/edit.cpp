// Placeholder: the edit subsystem's bindings are added with its C++ code.
#include "common.hpp"

namespace kernelsmith::bindings {

void init_edit(py::module_& /*m*/) {}

}  // namespace kernelsmith::bindings
