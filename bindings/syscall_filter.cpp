// Bindings for the worker's seccomp-BPF filter (syscall_filter.hpp): the
// evaluation worker installs it right before it loads a candidate's code.
#include <pybind11/stl.h>

#include "common.hpp"
#include "kernelsmith/syscall_filter.hpp"

namespace kernelsmith::bindings {

void init_syscall_filter(py::module_& m) {
  namespace sf = syscall_filter;
  m.def("syscall_filter_supported", &sf::supported,
        "Whether the worker's system-call filter can be installed here (Linux x86_64 with seccomp).");
  m.def(
      "syscall_filter_install", &sf::install, py::arg("fds"), py::arg("report_fd") = 2,
      "Install the filter on this process (every thread), protecting the descriptors `fds` (the "
      "evaluator's channel), answered by a supervisor thread: dup2/dup3 onto them and close/close_range "
      "over them by this process, and ptrace, process_vm_readv/writev and pidfd_getfd by it, end the "
      "process (SIGKILL) after one line on `report_fd` that says what happened; by a process it started, the "
      "first are let through and the others refused and recorded. A seccomp filter of its own (seccomp "
      "SECCOMP_SET_MODE_FILTER/STRICT, prctl PR_SET_SECCOMP) ends the process (a descendant's is its own). "
      "mprotect/pkey_mprotect that would make a file's code writable, add execute to a file's mapping without "
      "it, or make memory executable over code recorded at install (every file's executable mapping then, and "
      "the vDSO) that is no longer that file there, and an executable mmap/shmat or an mremap MREMAP_FIXED "
      "over that code, end the process too (a "
      "descendant's own memory is let through); opening a process's memory file (/proc/<n>/mem) for "
      "writing is refused in any process. The lines go to `report_fd` (a descriptor of its own on the log, "
      "listed in `fds` too). Once per process.");
  m.def("syscall_filter_installed", &sf::installed, "Whether the filter is installed in this process.");
  m.def("syscall_filter_listener", &sf::listener_fd,
        "The supervisor's listener descriptor (-1 before install): the harness checks it is still there.");
  m.def("syscall_filter_protected", &sf::protected_fds, "The descriptors the filter protects.");
  m.def("syscall_filter_attempts", &sf::attempts,
        "Refused calls recorded in this process or a process forked from it after install.");
  m.def("syscall_filter_reason", &sf::reason, "What the first recorded refused call was; '' when none.");
  m.def("syscall_filter_fail", &sf::fail, py::arg("reason"),
        "Write `reason` as the filter's line on fd 2 and end the process with SIGKILL (never returns).");
  m.def(
      "raw_monotonic_ns", &sf::raw_monotonic_ns,
      "CLOCK_MONOTONIC in ns through the system-call instruction itself (no libc, vDSO or GOT slot on the "
      "way); -1 where it cannot be read so. The CPU timing's clock (time.perf_counter_ns) is checked against "
      "it.");
  m.attr("SYSCALL_FILTER_LOG_PREFIX") = sf::kLogPrefix;
}

}  // namespace kernelsmith::bindings
