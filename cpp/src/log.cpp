#include "kernelsmith/log.hpp"

#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>

namespace kernelsmith {

namespace {
std::mutex& logger_mutex() {
  static std::mutex mutex;
  return mutex;
}
}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto created =
        std::make_shared<spdlog::logger>("kernelsmith", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    created->set_level(spdlog::level::warn);
    return created;
  }();
  return instance;
}

void set_log_sink(std::shared_ptr<spdlog::sinks::sink> sink) {
  std::lock_guard<std::mutex> lock(logger_mutex());
  auto log = logger();
  log->sinks().clear();
  if (sink) log->sinks().push_back(std::move(sink));
}

void set_log_level(int spdlog_level) {
  logger()->set_level(static_cast<spdlog::level::level_enum>(spdlog_level));
}

}  // namespace kernelsmith
