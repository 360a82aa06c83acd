// The core logs through one spdlog logger named "kernelsmith". The Python
// bindings replace its sink with one that forwards to Python's `logging`, so
// C++ messages appear wherever the user's logging configuration sends them.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace kernelsmith {

// The shared logger; created on first use with a stderr sink at warn level.
std::shared_ptr<spdlog::logger> logger();

// Replace every sink of the shared logger (the bindings install a Python sink).
void set_log_sink(std::shared_ptr<spdlog::sinks::sink> sink);

// spdlog level number (0 trace .. 6 off). Messages below it are never
// formatted, so hot loops pay nothing for disabled debug logging.
void set_log_level(int spdlog_level);

}  // namespace kernelsmith
