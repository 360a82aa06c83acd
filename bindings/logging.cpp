#include <memory>
#include <mutex>
#include <string>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <spdlog/sinks/base_sink.h>

#include "common.hpp"
#include "kernelsmith/log.hpp"

namespace kernelsmith::bindings {

namespace {

// Forwards each formatted record to a Python callable (level, message).
// It takes the GIL, so every binding that may log from inside a C++ lock must
// release the GIL before taking that lock (they all do: see py::call_guard).
class PythonSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit PythonSink(py::function callback) : callback_(std::move(callback)) {}
  ~PythonSink() override {
    // After interpreter shutdown the reference cannot be dropped safely; leak it.
    if (!Py_IsInitialized()) {
      callback_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    callback_ = py::function();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!Py_IsInitialized()) return;
    std::string text(msg.payload.data(), msg.payload.size());
    py::gil_scoped_acquire gil;
    try {
      callback_(static_cast<int>(msg.level), text);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("kernelsmith log sink");
    }
  }
  void flush_() override {}

 private:
  py::function callback_;
};

}  // namespace

void init_logging(py::module_& m) {
  m.def(
      "_set_log_callback",
      [](py::object callback) {
        if (callback.is_none()) {
          set_log_sink(nullptr);
        } else {
          set_log_sink(std::make_shared<PythonSink>(callback.cast<py::function>()));
        }
      },
      py::arg("callback"), "Route C++ log records to callback(level, message); None restores silence.");
  m.def("_set_log_level", &set_log_level, py::arg("spdlog_level"),
        "Lowest spdlog level (0 trace .. 6 off) that reaches the callback.");
  m.def(
      "_log",
      [](int level, const std::string& message) {
        logger()->log(static_cast<spdlog::level::level_enum>(level), "{}", message);
      },
      py::arg("level"), py::arg("message"), "Emit a record through the C++ logger (for tests).");
}

}  // namespace kernelsmith::bindings
