#include "kernelsmith/curate/minhash.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>
#include <thread>

#include "kernelsmith/error.hpp"
#include "kernelsmith/edit/normalize.hpp"

namespace kernelsmith::minhash {

namespace {

constexpr std::uint64_t kMersenne61 = (std::uint64_t{1} << 61) - 1;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// (a * x + b) mod 2^61-1 for a, x, b < 2^61, via the Mersenne reduction
// (branch-free so the per-permutation loop vectorizes well).
inline std::uint64_t mod_mul_add(std::uint64_t a, std::uint64_t x, std::uint64_t b) {
  const __uint128_t v = static_cast<__uint128_t>(a) * x + b;
  std::uint64_t r = (static_cast<std::uint64_t>(v) & kMersenne61) + static_cast<std::uint64_t>(v >> 61);
  r = (r & kMersenne61) + (r >> 61);
  return r - (r >= kMersenne61 ? kMersenne61 : 0);
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (c & 0x80); }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (c & 0x80); }

}  // namespace

std::vector<std::string> tokenize(std::string_view s) {
  static const char* kTwoChar[] = {"**", "//", "==", "!=", "<=", ">=", "->", "+=", "-=", "*=",
                                   "/=", "<<", ">>", ":=", "@=", "%=", "&=", "|=", "^="};
  std::vector<std::string> out;
  std::size_t i = 0, n = s.size();
  while (i < n) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\\') {
      ++i;
    } else if (c == '#') {
      while (i < n && s[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      std::size_t start = i;
      bool triple = i + 2 < n && s[i + 1] == c && s[i + 2] == c;
      std::size_t q = triple ? 3 : 1;
      i += q;
      while (i < n) {
        if (s[i] == '\\') {
          i += 2;
          continue;
        }
        if (triple) {
          if (s[i] == c && i + 2 < n && s[i + 1] == c && s[i + 2] == c) {
            i += 3;
            break;
          }
        } else if (s[i] == c || s[i] == '\n') {
          ++i;
          break;
        }
        ++i;
      }
      out.emplace_back(s.substr(start, std::min(i, n) - start));
    } else if (ident_start(c)) {
      std::size_t start = i;
      while (i < n && ident_char(s[i])) ++i;
      out.emplace_back(s.substr(start, i - start));
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      std::size_t start = i;
      while (i < n && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == '_' ||
                       ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E'))))
        ++i;
      out.emplace_back(s.substr(start, i - start));
    } else {
      std::size_t len = 1;
      if (i + 1 < n) {
        for (const char* op : kTwoChar) {
          if (s[i] == op[0] && s[i + 1] == op[1]) {
            len = 2;
            break;
          }
        }
      }
      out.emplace_back(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::vector<std::uint64_t> shingle_hashes(std::string_view source, int k) {
  KS_REQUIRE(k >= 1, "shingle must be >= 1, got " << k);
  const auto tokens = tokenize(source);
  std::vector<std::uint64_t> th(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) th[i] = fnv1a64(tokens[i]);
  std::vector<std::uint64_t> out;
  if (th.empty()) return out;
  const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(k), th.size());
  out.reserve(th.size() - kk + 1);
  for (std::size_t i = 0; i + kk <= th.size(); ++i) {
    std::uint64_t h = 0x51ed270b27e4b3a1ULL;
    for (std::size_t j = 0; j < kk; ++j) h = splitmix64(h ^ th[i + j]);
    out.push_back(h);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  std::size_t i = 0, j = 0, inter = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++inter, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(inter) / static_cast<double>(a.size() + b.size() - inter);
}

void Params::validate() const {
  KS_REQUIRE(num_perm >= 1 && num_perm <= 4096, "num_perm must be in [1, 4096], got " << num_perm);
  KS_REQUIRE(bands >= 1 && bands <= num_perm && num_perm % bands == 0,
             "bands must divide num_perm (" << num_perm << "), got " << bands);
  KS_REQUIRE(shingle >= 1 && shingle <= 64, "shingle must be in [1, 64], got " << shingle);
  KS_REQUIRE(threshold >= 0.0 && threshold <= 1.0, "threshold must be in [0, 1], got " << threshold);
}

MinHasher::MinHasher(int num_perm, std::uint64_t seed) {
  KS_REQUIRE(num_perm >= 1, "num_perm must be >= 1, got " << num_perm);
  a_.resize(static_cast<std::size_t>(num_perm));
  b_.resize(static_cast<std::size_t>(num_perm));
  std::uint64_t state = splitmix64(seed ^ 0x6d696e68617368ULL);
  for (int i = 0; i < num_perm; ++i) {
    // a in [1, p-1], b in [0, p-1]: a distinct universal hash per permutation
    state = splitmix64(state);
    a_[static_cast<std::size_t>(i)] = 1 + state % (kMersenne61 - 1);
    state = splitmix64(state);
    b_[static_cast<std::size_t>(i)] = state % kMersenne61;
  }
}

std::vector<std::uint64_t> MinHasher::signature(const std::vector<std::uint64_t>& shingles) const {
  const std::size_t m = a_.size();
  std::vector<std::uint64_t> sig(m, std::numeric_limits<std::uint64_t>::max());
  // Shingle hashes are already uniform 64-bit values; reducing them mod p once
  // keeps each h_i a universal hash over [0, p).
  for (std::uint64_t raw : shingles) {
    const std::uint64_t x = raw % kMersenne61;
    const std::uint64_t* a = a_.data();
    const std::uint64_t* b = b_.data();
    std::uint64_t* out = sig.data();
    for (std::size_t i = 0; i < m; ++i) {
      const std::uint64_t h = mod_mul_add(a[i], x, b[i]);
      out[i] = h < out[i] ? h : out[i];
    }
  }
  return sig;
}

double estimate_jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  KS_REQUIRE(a.size() == b.size() && !a.empty(),
             "signatures must have the same non-zero length, got " << a.size() << " and " << b.size());
  std::size_t eq = 0;
  for (std::size_t i = 0; i < a.size(); ++i) eq += a[i] == b[i];
  return static_cast<double>(eq) / static_cast<double>(a.size());
}

LSHIndex::LSHIndex(Params params)
    : params_((params.validate(), params)),
      hasher_(params.num_perm, params.seed),
      rows_(params.num_perm / params.bands),
      buckets_(static_cast<std::size_t>(params.bands)) {}

const std::uint64_t* LSHIndex::sig_ptr(std::size_t id) const {
  KS_REQUIRE(id < count_, "document id " << id << " out of range (size " << count_ << ")");
  return sigs_.data() + id * static_cast<std::size_t>(params_.num_perm);
}

std::uint64_t LSHIndex::band_key(const std::uint64_t* sig, int band) const {
  std::uint64_t h = splitmix64(static_cast<std::uint64_t>(band) + 0x2545f4914f6cdd1dULL);
  for (int r = 0; r < rows_; ++r) h = splitmix64(h ^ sig[band * rows_ + r]);
  return h;
}

void LSHIndex::insert_signature(const std::vector<std::uint64_t>& sig) {
  const std::size_t id = count_++;
  sigs_.insert(sigs_.end(), sig.begin(), sig.end());
  for (int b = 0; b < params_.bands; ++b)
    buckets_[static_cast<std::size_t>(b)][band_key(sig.data(), b)].push_back(id);
}

std::size_t LSHIndex::add(std::string_view source) {
  insert_signature(hasher_.signature(shingle_hashes(source, params_.shingle)));
  return count_ - 1;
}

std::size_t LSHIndex::add_many(const std::vector<std::string>& sources, int threads) {
  const std::size_t first = count_;
  if (sources.empty()) return first;
  std::size_t nthreads = threads > 0 ? static_cast<std::size_t>(threads)
                                     : std::max(1u, std::thread::hardware_concurrency());
  nthreads = std::min(nthreads, sources.size());
  std::vector<std::vector<std::uint64_t>> sigs(sources.size());
  auto work = [&](std::size_t t) {
    for (std::size_t i = t; i < sources.size(); i += nthreads)
      sigs[i] = hasher_.signature(shingle_hashes(sources[i], params_.shingle));
  };
  if (nthreads == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < nthreads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
  }
  sigs_.reserve(sigs_.size() + sources.size() * static_cast<std::size_t>(params_.num_perm));
  for (const auto& s : sigs) insert_signature(s);
  return first;
}

std::vector<std::uint64_t> LSHIndex::signature(std::size_t id) const {
  const std::uint64_t* p = sig_ptr(id);
  return std::vector<std::uint64_t>(p, p + params_.num_perm);
}

double LSHIndex::estimate(std::size_t i, std::size_t j) const {
  const std::uint64_t* a = sig_ptr(i);
  const std::uint64_t* b = sig_ptr(j);
  std::size_t eq = 0;
  for (int k = 0; k < params_.num_perm; ++k) eq += a[k] == b[k];
  return static_cast<double>(eq) / static_cast<double>(params_.num_perm);
}

std::vector<std::size_t> LSHIndex::candidates(std::size_t id) const {
  const std::uint64_t* sig = sig_ptr(id);
  std::vector<std::size_t> out;
  for (int b = 0; b < params_.bands; ++b) {
    const auto& bucket = buckets_[static_cast<std::size_t>(b)];
    auto it = bucket.find(band_key(sig, b));
    if (it == bucket.end()) continue;
    for (std::size_t other : it->second)
      if (other != id) out.push_back(other);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::size_t> LSHIndex::query(std::string_view source) const {
  const auto sig = hasher_.signature(shingle_hashes(source, params_.shingle));
  std::vector<std::size_t> out;
  for (int b = 0; b < params_.bands; ++b) {
    const auto& bucket = buckets_[static_cast<std::size_t>(b)];
    auto it = bucket.find(band_key(sig.data(), b));
    if (it == bucket.end()) continue;
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::vector<std::size_t> kept;
  for (std::size_t id : out) {
    if (estimate_jaccard(sig, signature(id)) >= params_.threshold) kept.push_back(id);
  }
  return kept;
}

std::vector<std::pair<std::size_t, std::size_t>> LSHIndex::near_duplicate_pairs() const {
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (const auto& bucket_map : buckets_) {
    for (const auto& kv : bucket_map) {
      const auto& ids = kv.second;
      for (std::size_t x = 0; x < ids.size(); ++x)
        for (std::size_t y = x + 1; y < ids.size(); ++y) pairs.emplace_back(ids[x], ids[y]);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::vector<std::pair<std::size_t, std::size_t>> kept;
  for (const auto& p : pairs)
    if (estimate(p.first, p.second) >= params_.threshold) kept.push_back(p);
  return kept;
}

std::vector<std::size_t> LSHIndex::groups() const {
  std::vector<std::size_t> parent(count_);
  std::iota(parent.begin(), parent.end(), std::size_t{0});
  auto find = [&](std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const auto& p : near_duplicate_pairs()) {
    std::size_t a = find(p.first), b = find(p.second);
    if (a == b) continue;
    // the smaller id becomes the root, so each group is named by its first member
    if (a < b)
      parent[b] = a;
    else
      parent[a] = b;
  }
  std::vector<std::size_t> out(count_);
  for (std::size_t i = 0; i < count_; ++i) out[i] = find(i);
  return out;
}

}  // namespace kernelsmith::minhash
