// Placeholder: the opencl subsystem's bindings are added with its C++ code.
#include "common.hpp"

namespace kernelsmith::bindings {

void init_opencl(py::module_& /*m*/) {}

}  // namespace kernelsmith::bindings
