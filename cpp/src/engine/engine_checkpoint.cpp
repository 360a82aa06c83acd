// Checkpoint files: <dir>/checkpoint-NNNNNN.json, one JSON document
//   {"format":"kernelsmith-engine-checkpoint","version":1,"state":{...},"checksum":"<fnv1a64 hex>"}
// where the checksum covers the exact bytes of the "state" value, so a
// truncated or altered file is detected before anything is parsed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "kernelsmith/engine/engine.hpp"
#include "kernelsmith/error.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace fs = std::filesystem;

namespace kernelsmith {

namespace {

constexpr const char* kPrefix = "{\"format\":\"kernelsmith-engine-checkpoint\",\"version\":1,\"state\":";
constexpr const char* kChecksumKey = ",\"checksum\":\"";

std::string hex64(std::uint64_t v) {
  std::ostringstream out;
  out << std::hex << std::setw(16) << std::setfill('0') << v;
  return out.str();
}

// Sequence number of a checkpoint file name, or -1.
long checkpoint_number(const std::string& name) {
  const std::string head = "checkpoint-", tail = ".json";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stol(digits);
}

void write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      KS_THROW(Error, "writing " << path << " failed: " << std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

std::vector<std::string> Engine::list_checkpoints(const std::string& dir) {
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const long n = checkpoint_number(entry.path().filename().string());
    if (n >= 0 && entry.is_regular_file()) found.emplace_back(n, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string Engine::save(const std::string& dir) const {
  static std::mutex save_mutex;  // serializes numbering within the process
  const std::string body = state_to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string document = std::string(kPrefix) + body + kChecksumKey + hex64(fnv1a64(body)) + "\"}\n";

  std::lock_guard<std::mutex> lock(save_mutex);
  std::error_code ec;
  fs::create_directories(dir, ec);
  KS_REQUIRE(fs::is_directory(dir), "save: cannot create checkpoint directory '" << dir << "'");
  const auto existing = list_checkpoints(dir);
  const long next = existing.empty() ? 1
                                     : checkpoint_number(fs::path(existing.back()).filename().string()) + 1;
  std::ostringstream name;
  name << "checkpoint-" << std::setw(6) << std::setfill('0') << next << ".json";
  const fs::path final_path = fs::path(dir) / name.str();
  const fs::path tmp_path = fs::path(dir) / ("." + name.str() + ".tmp");

  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) KS_THROW(Error, "save: cannot open " << tmp_path.string() << ": " << std::strerror(errno));
  try {
    write_all(fd, document, tmp_path.string());
    if (::fsync(fd) != 0) KS_THROW(Error, "save: fsync of " << tmp_path.string() << " failed");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp_path.c_str());
    throw;
  }
  ::close(fd);
  // A new name each time: an existing checkpoint is never overwritten.
  if (std::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp_path.c_str());
    KS_THROW(Error, "save: rename to " << final_path.string() << " failed: " << std::strerror(errno));
  }
  fsync_dir(dir);
  auto all = list_checkpoints(dir);
  const auto keep = static_cast<std::size_t>(config_.keep_checkpoints);
  for (std::size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i], ec);
  return final_path.string();
}

std::unique_ptr<Engine> Engine::load(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  std::string previous;
  if (fs::is_directory(path, ec)) {
    const auto all = list_checkpoints(path);
    KS_REQUIRE(!all.empty(), "load: no checkpoint-*.json in directory '" << path << "'");
    file = all.back();
    if (all.size() >= 2) previous = all[all.size() - 2];
  } else {
    KS_REQUIRE(fs::is_regular_file(path, ec), "load: no checkpoint file or directory at '" << path << "'");
    const auto all = list_checkpoints(fs::path(path).parent_path().string());
    for (std::size_t i = 1; i < all.size(); ++i)
      if (fs::equivalent(all[i], path, ec)) previous = all[i - 1];
  }
  auto corrupt = [&](const std::string& why) {
    std::ostringstream msg;
    msg << "checkpoint '" << file << "' is corrupt or truncated: " << why;
    if (!previous.empty()) msg << "; the previous checkpoint '" << previous << "' can be loaded instead";
    return msg.str();
  };
  std::ifstream in(file, std::ios::binary);
  KS_REQUIRE(in, "load: cannot read '" << file << "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::string prefix = kPrefix;
  if (text.compare(0, prefix.size(), prefix) != 0)
    KS_THROW(CorruptState, corrupt("it does not start with the kernelsmith checkpoint header"));
  const std::size_t mark = text.rfind(kChecksumKey);
  const std::size_t sum_at = mark + std::strlen(kChecksumKey);
  if (mark == std::string::npos || mark < prefix.size() || text.size() < sum_at + 18 ||
      text.compare(sum_at + 16, 2, "\"}") != 0)
    KS_THROW(CorruptState, corrupt("the checksum trailer is missing"));
  const std::string body = text.substr(prefix.size(), mark - prefix.size());
  if (hex64(fnv1a64(body)) != text.substr(sum_at, 16)) KS_THROW(CorruptState, corrupt("checksum mismatch"));
  try {
    return from_state(nlohmann::json::parse(body));
  } catch (const nlohmann::json::exception& e) {
    KS_THROW(CorruptState, corrupt(e.what()));
  } catch (const InvalidArgument& e) {
    KS_THROW(CorruptState, corrupt(e.message()));
  }
}

}  // namespace kernelsmith
