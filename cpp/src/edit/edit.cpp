#include "kernelsmith/edit/edit.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "kernelsmith/error.hpp"

namespace kernelsmith::edit {

namespace {

constexpr const char* kStartToken = "EVOLVE-BLOCK-START";
constexpr const char* kEndToken = "EVOLVE-BLOCK-END";

// Text as lines without their '\n'; remembers whether the text ended with a
// newline so that joining gives the same text back.
struct Lines {
  std::vector<std::string> lines;
  bool trailing_newline = false;
};

std::string normalize_newlines(const std::string& text) {
  if (text.find('\r') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out.push_back(text[i]);
  }
  return out;
}

Lines split_lines(const std::string& raw) {
  const std::string text = normalize_newlines(raw);
  Lines out;
  if (text.empty()) return out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) {
      out.lines.push_back(text.substr(begin));
      return out;
    }
    out.lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  out.trailing_newline = true;
  return out;
}

std::string join_lines(const std::vector<std::string>& lines, bool trailing_newline) {
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    if (i + 1 < lines.size() || trailing_newline) out += '\n';
  }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }

std::string rstrip(const std::string& s) {
  std::size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return s.substr(0, end);
}

std::string strip(const std::string& s) {
  std::size_t begin = 0;
  while (begin < s.size() && is_space(s[begin])) ++begin;
  std::size_t end = s.size();
  while (end > begin && is_space(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

// Internal whitespace runs collapsed to one space, ends stripped.
std::string collapse(const std::string& s) {
  std::string out;
  bool pending_space = false;
  for (char c : s) {
    if (is_space(c)) {
      pending_space = !out.empty();
    } else {
      if (pending_space) out.push_back(' ');
      pending_space = false;
      out.push_back(c);
    }
  }
  return out;
}

std::size_t indent_width(const std::string& s) {
  std::size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

bool is_blank(const std::string& s) { return strip(s).empty(); }

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Shortens a line for a message so a pathological line cannot flood it.
std::string clip(const std::string& s, std::size_t max = 160) {
  if (s.size() <= max) return s;
  return s.substr(0, max) + "...";
}

enum class MarkerKind { None, Start, End, Misplaced };

struct Marker {
  MarkerKind kind = MarkerKind::None;
  bool is_start = false;
};

// A marker line is a comment holding the token and nothing else of code.
Marker classify_marker(const std::string& line) {
  const bool has_start = line.find(kStartToken) != std::string::npos;
  const bool has_end = line.find(kEndToken) != std::string::npos;
  if (!has_start && !has_end) return {};
  const std::string s = strip(line);
  const bool comment = starts_with(s, "#") || starts_with(s, "//");
  if (!comment || (has_start && has_end)) return {MarkerKind::Misplaced, has_start};
  return {has_start ? MarkerKind::Start : MarkerKind::End, has_start};
}

std::string describe_blocks(const std::vector<EvolveBlock>& blocks) {
  if (blocks.empty()) return "none (the whole program is evolvable)";
  std::ostringstream out;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i) out << ", ";
    out << "lines " << blocks[i].start_line << "-" << blocks[i].end_line;
  }
  return out.str();
}

BlockParse parse_lines(const std::vector<std::string>& lines) {
  BlockParse out;
  int open_line = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    const Marker m = classify_marker(lines[i]);
    std::ostringstream err;
    switch (m.kind) {
      case MarkerKind::None: continue;
      case MarkerKind::Misplaced:
        err << "line " << line_no << ": an EVOLVE-BLOCK marker must be alone on a comment line "
            << "(e.g. '# " << (m.is_start ? kStartToken : kEndToken) << "'), got: " << clip(strip(lines[i]));
        break;
      case MarkerKind::Start:
        if (open_line) {
          err << "line " << line_no << ": EVOLVE-BLOCK-START inside the block opened at line " << open_line
              << " (blocks cannot nest; close it with EVOLVE-BLOCK-END first)";
        } else {
          open_line = line_no;
          continue;
        }
        break;
      case MarkerKind::End:
        if (!open_line) {
          err << "line " << line_no << ": EVOLVE-BLOCK-END without a matching EVOLVE-BLOCK-START";
        } else {
          out.blocks.push_back({open_line, line_no});
          open_line = 0;
          continue;
        }
        break;
    }
    out.ok = false;
    out.error = err.str();
    return out;
  }
  if (open_line) {
    out.ok = false;
    out.error = "line " + std::to_string(open_line) +
                ": EVOLVE-BLOCK-START is never closed by an EVOLVE-BLOCK-END";
  }
  return out;
}

// Fixed regions as half-open 0-based line ranges: before the first block
// (up to and including its START marker), between blocks, after the last.
struct Region {
  int begin;
  int end;
};

std::vector<Region> fixed_regions(const std::vector<EvolveBlock>& blocks, int n_lines) {
  std::vector<Region> regions;
  int begin = 0;
  for (const auto& b : blocks) {
    regions.push_back({begin, b.start_line});  // includes the START marker (0-based start_line-1)
    begin = b.end_line - 1;                    // the END marker line, 0-based
  }
  regions.push_back({begin, n_lines});
  return regions;
}

std::string region_name(std::size_t index, const std::vector<EvolveBlock>& blocks) {
  std::ostringstream out;
  if (blocks.empty()) return "the program";
  if (index == 0) {
    out << "the fixed code before the first EVOLVE block (parent lines 1-" << blocks[0].start_line << ")";
  } else if (index == blocks.size()) {
    out << "the fixed code after the last EVOLVE block (parent lines " << blocks.back().end_line << "-end)";
  } else {
    out << "the fixed code between EVOLVE block " << index << " (ends at parent line "
        << blocks[index - 1].end_line << ") and block " << index + 1 << " (starts at parent line "
        << blocks[index].start_line << ")";
  }
  return out.str();
}

// Levenshtein ratio of two strings, (|a|+|b|-distance)/(|a|+|b|), with a
// substitution costing 2 (an insert plus a delete) so that unrelated strings
// score 0, as python-Levenshtein's ratio does.
double string_ratio(const std::string& a, const std::string& b) {
  const std::size_t total = a.size() + b.size();
  if (total == 0) return 1.0;
  if (a == b) return 1.0;
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 2);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  const double dist = static_cast<double>(prev[b.size()]);
  return std::max(0.0, (static_cast<double>(total) - dist) / static_cast<double>(total));
}

enum class Level { Exact, Trailing, Indentation, Whitespace };

const char* level_name(Level l) {
  switch (l) {
    case Level::Exact: return "exact";
    case Level::Trailing: return "trailing_whitespace";
    case Level::Indentation: return "indentation";
    case Level::Whitespace: return "whitespace";
  }
  return "";
}

std::string normalize_for(Level level, const std::string& s) {
  switch (level) {
    case Level::Exact: return s;
    case Level::Trailing: return rstrip(s);
    case Level::Indentation: return strip(s);
    case Level::Whitespace: return collapse(s);
  }
  return s;
}

struct Match {
  int begin;  // 0-based, inclusive
  int end;    // 0-based, exclusive
};

// All places where `needle` occurs in `hay` at `level`. The whitespace level
// skips blank lines on both sides and maps back to the original line span.
std::vector<Match> find_matches(const std::vector<std::string>& hay, const std::vector<std::string>& needle,
                                Level level) {
  std::vector<Match> found;
  if (level != Level::Whitespace) {
    if (needle.empty() || needle.size() > hay.size()) return found;
    std::vector<std::string> n(needle.size());
    for (std::size_t i = 0; i < needle.size(); ++i) n[i] = normalize_for(level, needle[i]);
    std::vector<std::string> h(hay.size());
    for (std::size_t i = 0; i < hay.size(); ++i) h[i] = normalize_for(level, hay[i]);
    for (std::size_t s = 0; s + n.size() <= h.size(); ++s) {
      bool ok = true;
      for (std::size_t k = 0; k < n.size() && ok; ++k) ok = h[s + k] == n[k];
      if (ok) found.push_back({static_cast<int>(s), static_cast<int>(s + n.size())});
    }
    return found;
  }
  std::vector<std::string> n;
  for (const auto& line : needle)
    if (!is_blank(line)) n.push_back(collapse(line));
  std::vector<std::string> h;
  std::vector<int> origin;
  for (std::size_t i = 0; i < hay.size(); ++i) {
    if (is_blank(hay[i])) continue;
    h.push_back(collapse(hay[i]));
    origin.push_back(static_cast<int>(i));
  }
  if (n.empty() || n.size() > h.size()) return found;
  for (std::size_t s = 0; s + n.size() <= h.size(); ++s) {
    bool ok = true;
    for (std::size_t k = 0; k < n.size() && ok; ++k) ok = h[s + k] == n[k];
    if (ok) found.push_back({origin[s], origin[s + n.size() - 1] + 1});
  }
  return found;
}

// Re-indents `replacement` by the offset between where the SEARCH text sits
// in the file and how the model indented it.
std::vector<std::string> reindent(const std::vector<std::string>& replacement,
                                  const std::vector<std::string>& search,
                                  const std::vector<std::string>& matched) {
  auto first_nonblank = [](const std::vector<std::string>& v) -> const std::string* {
    for (const auto& s : v)
      if (!is_blank(s)) return &s;
    return nullptr;
  };
  const std::string* s0 = first_nonblank(search);
  const std::string* m0 = first_nonblank(matched);
  if (!s0 || !m0) return replacement;
  const long delta = static_cast<long>(indent_width(*m0)) - static_cast<long>(indent_width(*s0));
  if (delta == 0) return replacement;
  // A model that flattened the SEARCH text but wrote the replacement at the
  // file's indentation already: shifting would indent it twice.
  const std::string* r0 = first_nonblank(replacement);
  if (r0 && indent_width(*r0) == indent_width(*m0)) return replacement;
  const std::string file_indent = m0->substr(0, indent_width(*m0));
  const char pad = file_indent.empty() ? ' ' : file_indent[0];
  std::vector<std::string> out;
  out.reserve(replacement.size());
  for (const auto& line : replacement) {
    if (is_blank(line)) {
      out.push_back(line);
    } else if (delta > 0) {
      out.push_back(std::string(static_cast<std::size_t>(delta), pad) + line);
    } else {
      const std::size_t remove = std::min(static_cast<std::size_t>(-delta), indent_width(line));
      out.push_back(line.substr(remove));
    }
  }
  return out;
}

struct Nearest {
  int begin = -1;
  int end = -1;
  double similarity = 0.0;
};

// The window of the same height as the SEARCH text with the highest line
// similarity. Blank lines at the ends of the SEARCH text are ignored.
Nearest nearest_region(const std::vector<std::string>& hay, const std::vector<std::string>& needle) {
  Nearest best;
  if (needle.empty() || hay.empty()) return best;
  const std::size_t height = std::min(needle.size(), hay.size());
  std::vector<std::string> n(needle.size()), h(hay.size());
  for (std::size_t i = 0; i < needle.size(); ++i) n[i] = strip(needle[i]);
  for (std::size_t i = 0; i < hay.size(); ++i) h[i] = strip(hay[i]);
  // Positional comparison (window line k against SEARCH line k) keeps this
  // O(lines * height * line length), cheap enough since it only runs when a
  // block failed.
  for (std::size_t s = 0; s + height <= h.size(); ++s) {
    double total = 0.0;
    for (std::size_t k = 0; k < height; ++k) total += string_ratio(n[k], h[s + k]);
    const double sim = total / static_cast<double>(std::max(needle.size(), height));
    if (sim > best.similarity + 1e-12) {
      best = {static_cast<int>(s), static_cast<int>(s + height), sim};
    }
  }
  return best;
}

std::vector<std::string> trim_blank_ends(const std::vector<std::string>& v) {
  std::size_t b = 0, e = v.size();
  while (b < e && is_blank(v[b])) ++b;
  while (e > b && is_blank(v[e - 1])) --e;
  return std::vector<std::string>(v.begin() + static_cast<long>(b), v.begin() + static_cast<long>(e));
}

// Whether [begin, end) lies within the content of one EVOLVE block.
bool inside_blocks(const Match& m, const std::vector<EvolveBlock>& blocks) {
  if (blocks.empty()) return true;
  for (const auto& b : blocks) {
    // Content lines are start_line+1 .. end_line-1 (1-based) = start_line .. end_line-2 (0-based).
    if (m.begin >= b.start_line && m.end <= b.end_line - 1) return true;
  }
  return false;
}

std::string excerpt(const std::vector<std::string>& lines, int begin, int end, int max_lines = 40) {
  std::ostringstream out;
  const int stop = std::min(end, begin + max_lines);
  for (int i = begin; i < stop; ++i) out << lines[static_cast<std::size_t>(i)] << "\n";
  if (stop < end) out << "... (" << end - stop << " more lines)\n";
  return out.str();
}

BlockOutcome apply_one(std::vector<std::string>& lines, const DiffBlock& block, int index) {
  BlockOutcome outcome;
  outcome.index = index;
  outcome.response_line = block.response_line;
  std::ostringstream msg;
  msg << "SEARCH/REPLACE block " << index + 1 << " (response line " << block.response_line << ")";
  const std::string head = msg.str();
  if (!block.well_formed) {
    outcome.status = "malformed";
    outcome.message = head + " is malformed: " + block.error;
    return outcome;
  }
  const std::vector<std::string> search = trim_blank_ends(split_lines(block.search).lines);
  if (search.empty()) {
    outcome.status = "empty_search";
    outcome.message = head +
                      " has an empty SEARCH section; copy the lines to replace from the "
                      "current program into SEARCH.";
    return outcome;
  }
  const std::vector<std::string> replace = split_lines(block.replace).lines;
  const BlockParse parsed = parse_lines(lines);
  const std::vector<EvolveBlock> blocks = parsed.ok ? parsed.blocks : std::vector<EvolveBlock>{};

  for (Level level : {Level::Exact, Level::Trailing, Level::Indentation, Level::Whitespace}) {
    const std::vector<Match> all = find_matches(lines, search, level);
    if (all.empty()) continue;
    std::vector<Match> inside;
    for (const auto& m : all)
      if (inside_blocks(m, blocks)) inside.push_back(m);
    if (inside.empty()) {
      outcome.status = "outside_blocks";
      outcome.start_line = all[0].begin + 1;
      outcome.end_line = all[0].end;
      std::ostringstream out;
      out << head << " matches lines " << outcome.start_line << "-" << outcome.end_line
          << ", which are outside the EVOLVE blocks (" << describe_blocks(blocks)
          << "); only code strictly between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change.";
      outcome.message = out.str();
      return outcome;
    }
    if (inside.size() > 1) {
      outcome.status = "ambiguous";
      std::ostringstream out;
      out << head << " is ambiguous: its SEARCH text matches " << inside.size() << " places (lines ";
      for (std::size_t i = 0; i < inside.size(); ++i) {
        if (i) out << ", ";
        out << inside[i].begin + 1 << "-" << inside[i].end;
      }
      out << "); add surrounding lines to SEARCH so it matches exactly one place.";
      outcome.message = out.str();
      return outcome;
    }
    const Match m = inside[0];
    std::vector<std::string> matched(lines.begin() + m.begin, lines.begin() + m.end);
    std::vector<std::string> new_lines = (level == Level::Indentation || level == Level::Whitespace)
                                             ? reindent(replace, search, matched)
                                             : replace;
    lines.erase(lines.begin() + m.begin, lines.begin() + m.end);
    lines.insert(lines.begin() + m.begin, new_lines.begin(), new_lines.end());
    outcome.status = "applied";
    outcome.match_level = level_name(level);
    outcome.start_line = m.begin + 1;
    outcome.end_line = m.end;
    outcome.message = head + " applied at lines " + std::to_string(m.begin + 1) + "-" +
                      std::to_string(m.end) + " (" + level_name(level) + " match)";
    return outcome;
  }

  outcome.status = "no_match";
  std::ostringstream out;
  out << head << " did not apply: its SEARCH text is not in the current program.";
  const Nearest near = nearest_region(lines, search);
  if (near.begin >= 0) {
    outcome.nearest_start = near.begin + 1;
    outcome.nearest_end = near.end;
    outcome.similarity = near.similarity;
    out.setf(std::ios::fixed);
    out.precision(2);
    out << " Nearest match: lines " << near.begin + 1 << "-" << near.end << " (similarity " << near.similarity
        << ").";
    for (std::size_t k = 0; k < search.size() && near.begin + static_cast<int>(k) < near.end; ++k) {
      const std::string& file_line = lines[static_cast<std::size_t>(near.begin) + k];
      if (strip(file_line) != strip(search[k])) {
        out << " First difference: SEARCH line " << k + 1 << " is `" << clip(strip(search[k]))
            << "` but program line " << near.begin + static_cast<int>(k) + 1 << " is `"
            << clip(strip(file_line)) << "`.";
        break;
      }
    }
    out << "\nThe current program at lines " << near.begin + 1 << "-" << near.end << ":\n"
        << excerpt(lines, near.begin, near.end);
  }
  out << "Copy the SEARCH text exactly from the current program.";
  outcome.message = out.str();
  return outcome;
}

// Marker lines for diffs: a run of 5..9 identical characters then the word.
bool is_marker(const std::string& raw, char c, const std::string& word) {
  const std::string s = strip(raw);
  std::size_t n = 0;
  while (n < s.size() && s[n] == c) ++n;
  if (n < 5 || n > 9) return false;
  return strip(s.substr(n)) == word;
}

bool is_divider(const std::string& raw) {
  const std::string s = strip(raw);
  return s.size() >= 5 && s.size() <= 9 && s.find_first_not_of('=') == std::string::npos;
}

bool is_python_language(const std::string& lang) {
  return lang.empty() || lang == "python" || lang == "py" || lang == "python3";
}

}  // namespace

BlockParse parse_evolve_blocks(const std::string& source) { return parse_lines(split_lines(source).lines); }

EnforceResult check_evolve_blocks(const std::string& parent, const std::string& child) {
  EnforceResult out;
  const Lines p = split_lines(parent);
  const Lines c = split_lines(child);
  const BlockParse pb = parse_lines(p.lines);
  if (!pb.ok) {
    out.ok = false;
    out.error = "the parent program has malformed EVOLVE-BLOCK markers: " + pb.error;
    return out;
  }
  if (pb.blocks.empty()) return out;  // no markers: everything may change
  // A parent with no code outside its blocks (only the marker lines and
  // blank lines) is evolvable as a whole -- e.g. the reference wrapped for a
  // translation step -- so the child may bring its own block layout.
  bool nothing_fixed = true;
  for (std::size_t i = 0; i < p.lines.size() && nothing_fixed; ++i) {
    const int line_no = static_cast<int>(i) + 1;
    bool inside = false;
    for (const auto& b : pb.blocks) inside = inside || (line_no >= b.start_line && line_no <= b.end_line);
    if (!inside && !is_blank(p.lines[i])) nothing_fixed = false;
  }
  if (nothing_fixed) return out;
  const BlockParse cb = parse_lines(c.lines);
  if (!cb.ok) {
    out.ok = false;
    out.error = "the new program has malformed EVOLVE-BLOCK markers: " + cb.error;
    return out;
  }
  if (cb.blocks.size() != pb.blocks.size()) {
    std::ostringstream err;
    err << "the new program has " << cb.blocks.size() << " EVOLVE block(s) but the current program has "
        << pb.blocks.size() << " (at " << describe_blocks(pb.blocks)
        << "); keep every EVOLVE-BLOCK-START/EVOLVE-BLOCK-END marker and all code outside them "
           "unchanged.";
    out.ok = false;
    out.error = err.str();
    return out;
  }
  auto trimmed_size = [](const std::vector<std::string>& v) {
    int n = static_cast<int>(v.size());
    while (n > 0 && is_blank(v[static_cast<std::size_t>(n) - 1])) --n;
    return n;
  };
  const auto pr = fixed_regions(pb.blocks, trimmed_size(p.lines));
  const auto cr = fixed_regions(cb.blocks, trimmed_size(c.lines));
  for (std::size_t r = 0; r < pr.size(); ++r) {
    const int plen = pr[r].end - pr[r].begin;
    const int clen = cr[r].end - cr[r].begin;
    const int common = std::min(plen, clen);
    int k = 0;
    while (k < common && rstrip(p.lines[static_cast<std::size_t>(pr[r].begin + k)]) ==
                             rstrip(c.lines[static_cast<std::size_t>(cr[r].begin + k)]))
      ++k;
    if (k == plen && k == clen) continue;
    std::ostringstream err;
    err << "the new program changes " << region_name(r, pb.blocks) << ": ";
    out.parent_line = pr[r].begin + k + 1;
    out.child_line = cr[r].begin + k + 1;
    if (k < common) {
      err << "line " << out.parent_line << " of the current program is `"
          << clip(p.lines[static_cast<std::size_t>(pr[r].begin + k)]) << "` but line " << out.child_line
          << " of the new program is `" << clip(c.lines[static_cast<std::size_t>(cr[r].begin + k)]) << "`";
    } else if (k < plen) {
      err << "line " << out.parent_line << " of the current program (`"
          << clip(p.lines[static_cast<std::size_t>(pr[r].begin + k)]) << "`) is missing from the new program";
    } else {
      err << "the new program adds line " << out.child_line << " (`"
          << clip(c.lines[static_cast<std::size_t>(cr[r].begin + k)]) << "`) after line "
          << out.parent_line - 1 << " of the current program";
    }
    err << ". Only code strictly between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change (current "
           "program blocks: "
        << describe_blocks(pb.blocks) << ").";
    out.ok = false;
    out.error = err.str();
    return out;
  }
  return out;
}

std::vector<DiffBlock> parse_diff_blocks(const std::string& response) {
  const std::vector<std::string> lines = split_lines(response).lines;
  std::vector<DiffBlock> blocks;
  std::size_t i = 0;
  while (i < lines.size()) {
    if (!is_marker(lines[i], '<', "SEARCH")) {
      ++i;
      continue;
    }
    DiffBlock block;
    block.response_line = static_cast<int>(i) + 1;
    std::vector<std::string> search, replace;
    std::size_t j = i + 1;
    bool divided = false, ended = false;
    for (; j < lines.size(); ++j) {
      if (!divided && is_divider(lines[j])) {
        divided = true;
        continue;
      }
      if (is_marker(lines[j], '>', "REPLACE")) {
        ended = true;
        break;
      }
      if (is_marker(lines[j], '<', "SEARCH")) break;  // next block started early
      (divided ? replace : search).push_back(lines[j]);
    }
    if (!divided || !ended) {
      block.well_formed = false;
      block.error = !divided ? "missing the '=======' line between SEARCH and REPLACE"
                             : "missing the closing '>>>>>>> REPLACE' line";
    }
    block.search = join_lines(search, false);
    block.replace = join_lines(replace, false);
    blocks.push_back(std::move(block));
    i = ended ? j + 1 : j;
  }
  return blocks;
}

DiffResult apply_diff(const std::string& source, const std::vector<DiffBlock>& blocks) {
  Lines text = split_lines(source);
  DiffResult out;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    BlockOutcome o = apply_one(text.lines, blocks[i], static_cast<int>(i));
    if (o.applied())
      ++out.applied;
    else
      ++out.failed;
    out.blocks.push_back(std::move(o));
  }
  out.source = join_lines(text.lines, text.trailing_newline);
  return out;
}

FencedCode extract_fenced_code(const std::string& response) {
  struct Fence {
    std::string lang;
    std::string code;
    int start_line;
    bool closed;
  };
  const std::vector<std::string> lines = split_lines(response).lines;
  std::vector<Fence> fences;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string s = strip(lines[i]);
    if (!starts_with(s, "```")) continue;
    const std::size_t ticks_end = s.find_first_not_of('`');
    std::string lang = ticks_end == std::string::npos ? std::string() : strip(s.substr(ticks_end));
    std::transform(lang.begin(), lang.end(), lang.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    // Only the first word names the language (```python title="x").
    lang = lang.substr(0, lang.find_first_of(" \t{"));
    std::vector<std::string> body;
    std::size_t j = i + 1;
    bool closed = false;
    for (; j < lines.size(); ++j) {
      const std::string t = strip(lines[j]);
      if (starts_with(t, "```") && t.find_first_not_of('`') == std::string::npos) {
        closed = true;
        break;
      }
      body.push_back(lines[j]);
    }
    fences.push_back({lang, join_lines(body, !body.empty()), static_cast<int>(i) + 1, closed});
    i = j;
  }
  FencedCode out;
  out.count = static_cast<int>(fences.size());
  if (fences.empty()) return out;
  std::vector<int> pool;
  for (std::size_t k = 0; k < fences.size(); ++k)
    if (is_python_language(fences[k].lang)) pool.push_back(static_cast<int>(k));
  if (pool.empty())
    for (std::size_t k = 0; k < fences.size(); ++k) pool.push_back(static_cast<int>(k));
  auto filter = [&](const std::string& needle) {
    std::vector<int> kept;
    for (int k : pool)
      if (fences[static_cast<std::size_t>(k)].code.find(needle) != std::string::npos) kept.push_back(k);
    if (!kept.empty()) pool = kept;
    return !kept.empty();
  };
  if (!filter("class ModelNew")) filter(kStartToken);
  int best = pool[0];
  for (int k : pool)
    if (fences[static_cast<std::size_t>(k)].code.size() >= fences[static_cast<std::size_t>(best)].code.size())
      best = k;
  const Fence& f = fences[static_cast<std::size_t>(best)];
  out.found = true;
  out.code = f.code;
  out.language = f.lang;
  out.index = best;
  out.start_line = f.start_line;
  out.closed = f.closed;
  return out;
}

double line_similarity(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const std::size_t n = std::max(a.size(), b.size());
  if (n == 0) return 1.0;
  double total = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    total += string_ratio(strip(a[i]), strip(b[i]));
  return total / static_cast<double>(n);
}

EditMode parse_edit_mode(const std::string& name) {
  if (name == "diff") return EditMode::Diff;
  if (name == "full") return EditMode::Full;
  if (name == "auto") return EditMode::Auto;
  KS_THROW(InvalidArgument, "edit mode must be one of 'diff', 'full', 'auto', got '" << name << "'");
}

EditResult apply_edit(const std::string& parent_raw, const std::string& response, EditMode mode,
                      bool allow_partial) {
  EditResult out;
  const std::string parent = normalize_newlines(parent_raw);
  const BlockParse parent_blocks = parse_evolve_blocks(parent);
  if (!parent_blocks.ok) {
    // The parent comes from the archive or the user, not from the model, so
    // this is a setup problem; still reported as an outcome with the reason.
    out.mode = mode == EditMode::Full ? "full" : "diff";
    out.error = "the current program has malformed EVOLVE-BLOCK markers: " + parent_blocks.error;
    return out;
  }
  std::vector<DiffBlock> diff_blocks;
  if (mode != EditMode::Full) diff_blocks = parse_diff_blocks(response);
  const bool use_diff = mode == EditMode::Diff || (mode == EditMode::Auto && !diff_blocks.empty());

  if (use_diff) {
    out.mode = "diff";
    if (diff_blocks.empty()) {
      out.source = parent;
      out.error =
          "the response holds no SEARCH/REPLACE block; write each change as\n<<<<<<< SEARCH\n"
          "(lines copied exactly from the current program)\n=======\n(the new lines)\n>>>>>>> REPLACE";
      return out;
    }
    DiffResult diff = apply_diff(parent, diff_blocks);
    out.source = diff.source;
    out.blocks = diff.blocks;
    std::ostringstream err;
    for (const auto& b : diff.blocks)
      if (!b.applied()) err << b.message << "\n";
    if (diff.failed > 0) {
      err << diff.applied << " of " << diff.blocks.size() << " SEARCH/REPLACE blocks applied.";
    }
    out.error = err.str();
    out.ok = diff.failed == 0 || (allow_partial && diff.applied > 0);
  } else {
    out.mode = "full";
    out.fence = extract_fenced_code(response);
    if (!out.fence.found) {
      out.error =
          "the response holds no fenced code block; return the whole program in one "
          "```python ... ``` block.";
      return out;
    }
    out.source = out.fence.code;
    // An unclosed fence (a reply cut off by the output limit) is still taken;
    // the syntax check downstream reports a program that ends mid-way.
    out.ok = true;
  }

  const EnforceResult enforced = check_evolve_blocks(parent, out.source);
  if (!enforced.ok) {
    out.ok = false;
    out.error += (out.error.empty() || out.error.back() == '\n' ? "" : "\n") + enforced.error;
  }
  const BlockParse child_blocks = parse_evolve_blocks(out.source);
  if (child_blocks.ok) out.evolve_blocks = child_blocks.blocks;
  while (!out.error.empty() && out.error.back() == '\n') out.error.pop_back();
  return out;
}

}  // namespace kernelsmith::edit
