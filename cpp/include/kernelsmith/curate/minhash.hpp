// MinHash signatures and LSH banding for near-duplicate detection of source
// code (curation of nn.Module corpora). Token shingles are hashed once, then
// num_perm seeded universal hash functions h_i(x) = (a_i * x + b_i) mod p
// (p = 2^61 - 1) play the role of permutations; the signature keeps the
// minimum of each. LSH splits a signature into `bands` bands of
// rows = num_perm / bands values; two documents become a candidate pair when
// any band is equal, which happens with probability 1 - (1 - J^rows)^bands for
// Jaccard similarity J. Candidates are then checked against a threshold on
// the signature estimate of J.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kernelsmith::minhash {

// Python-like tokens: identifiers/keywords, numbers, string literals (each one
// token), operators (one or two characters). `#` comments and whitespace are
// dropped, so formatting and comments do not change the shingle set.
std::vector<std::string> tokenize(std::string_view source);

// 64-bit hashes of the distinct k-token shingles (k >= 1), sorted. A document
// shorter than k tokens yields one shingle of all its tokens (none if empty).
std::vector<std::uint64_t> shingle_hashes(std::string_view source, int k);

// Exact Jaccard similarity of two sets given as sorted unique vectors.
double jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b);

struct Params {
  int num_perm = 128;  // signature length
  int bands = 32;      // LSH bands; must divide num_perm
  int shingle = 5;     // tokens per shingle
  std::uint64_t seed = 1;
  double threshold = 0.8;  // estimated Jaccard at or above which a candidate pair is a near-duplicate
  void validate() const;   // KS_REQUIRE with the argument name and the allowed values
};

class MinHasher {
 public:
  explicit MinHasher(int num_perm, std::uint64_t seed);
  int num_perm() const { return static_cast<int>(a_.size()); }
  // Signature of a set of shingle hashes; an empty set gives all-max values.
  std::vector<std::uint64_t> signature(const std::vector<std::uint64_t>& shingles) const;

 private:
  std::vector<std::uint64_t> a_, b_;
};

// Fraction of equal positions: an unbiased estimate of the Jaccard similarity.
double estimate_jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b);

// An index of documents: signatures stored contiguously, one hash table per
// band. Documents are numbered in insertion order from 0.
class LSHIndex {
 public:
  explicit LSHIndex(Params params);
  const Params& params() const { return params_; }
  std::size_t size() const { return count_; }

  // Tokenize, shingle, sign and insert; returns the new document's id.
  std::size_t add(std::string_view source);
  // The same for many documents, signatures computed on `threads` threads
  // (0: hardware concurrency); ids are consecutive in input order.
  std::size_t add_many(const std::vector<std::string>& sources, int threads = 0);

  std::vector<std::uint64_t> signature(std::size_t id) const;
  double estimate(std::size_t i, std::size_t j) const;
  // Ids sharing at least one band with `id` (excluding `id`), ascending.
  std::vector<std::size_t> candidates(std::size_t id) const;
  // Ids of stored documents whose band matches the given source's, with
  // estimated similarity >= threshold, ascending (the source is not inserted).
  std::vector<std::size_t> query(std::string_view source) const;
  // All candidate pairs (i < j) whose estimated similarity >= threshold.
  std::vector<std::pair<std::size_t, std::size_t>> near_duplicate_pairs() const;
  // Connected components of near_duplicate_pairs(): for each document, the
  // smallest id of its group (so the first-inserted member represents it).
  std::vector<std::size_t> groups() const;

 private:
  std::uint64_t band_key(const std::uint64_t* sig, int band) const;
  void insert_signature(const std::vector<std::uint64_t>& sig);
  const std::uint64_t* sig_ptr(std::size_t id) const;

  Params params_;
  MinHasher hasher_;
  int rows_;
  std::size_t count_ = 0;
  std::vector<std::uint64_t> sigs_;  // count_ * num_perm
  std::vector<std::unordered_map<std::uint64_t, std::vector<std::size_t>>> buckets_;
};

}  // namespace kernelsmith::minhash
