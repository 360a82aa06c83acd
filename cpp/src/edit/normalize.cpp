#include "kernelsmith/edit/normalize.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_set>
#include <vector>

namespace kernelsmith {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }

// "\r\n" and lone "\r" become "\n" so line endings never make code new.
std::string unify_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Length of the string literal starting at s[i] (a quote character), or the
// rest of the line for an unterminated single-quoted literal.
std::size_t string_literal_length(const std::string& s, std::size_t i) {
  const char quote = s[i];
  const bool triple = i + 2 < s.size() && s[i + 1] == quote && s[i + 2] == quote;
  std::size_t j = i + (triple ? 3 : 1);
  while (j < s.size()) {
    char c = s[j];
    if (c == '\\') {
      j += 2;
      continue;
    }
    if (triple) {
      if (c == quote && j + 2 < s.size() && s[j + 1] == quote && s[j + 2] == quote) return j + 3 - i;
    } else {
      if (c == quote) return j + 1 - i;
      if (c == '\n') return j - i;  // unterminated: stop at the line end
    }
    ++j;
  }
  return std::min(j, s.size()) - i;
}

}  // namespace

std::string normalize_source(std::string_view source) {
  const std::string s = unify_newlines(source);
  std::string out;
  out.reserve(s.size());
  std::string line;          // current logical line being built
  bool has_content = false;  // line holds more than indentation
  bool in_indent = true;     // still reading the line's leading whitespace
  bool pending_space = false;

  auto flush_line = [&]() {
    if (has_content) {
      out += line;
      out.push_back('\n');
    }
    line.clear();
    has_content = false;
    in_indent = true;
    pending_space = false;
  };
  auto emit = [&](std::string_view text) {
    if (pending_space && has_content) line.push_back(' ');
    pending_space = false;
    line.append(text.data(), text.size());
    has_content = true;
    in_indent = false;
  };

  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      flush_line();
      ++i;
    } else if (is_blank(c)) {
      if (in_indent) {
        line.push_back(c);
      } else {
        pending_space = true;
      }
      ++i;
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '\'' || c == '"') {
      const std::size_t n = string_literal_length(s, i);
      emit(std::string_view(s).substr(i, n));
      i += n;
    } else if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      // Explicit line continuation: the logical line goes on.
      emit("\\\n");
      i += 2;
      // The next physical line's leading blanks are not indentation.
      while (i < s.size() && is_blank(s[i])) ++i;
    } else {
      std::size_t j = i;
      while (j < s.size() && !is_blank(s[j]) && s[j] != '\n' && s[j] != '#' && s[j] != '\'' && s[j] != '"' &&
             s[j] != '\\')
        ++j;
      if (j == i) j = i + 1;  // a lone backslash
      emit(std::string_view(s).substr(i, j - i));
      i = j;
    }
  }
  flush_line();
  return out;
}

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::uint64_t normalized_hash(std::string_view source) { return fnv1a64(normalize_source(source)); }

namespace {

enum class Tok { Name, Number, String, Op };

struct Token {
  Tok kind;
  std::string text;
};

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

}  // namespace

CodeStats code_stats(std::string_view source) {
  static const std::unordered_set<std::string> kBranch = {"if",     "elif", "else", "try",
                                                          "except", "and",  "or",   "case"};
  static const std::unordered_set<std::string> kLoop = {"for", "while"};
  static const std::unordered_set<std::string> kFunction = {"def", "lambda"};
  // Keywords followed by '(' are not calls: `if (x)`, `return (a, b)`.
  static const std::unordered_set<std::string> kKeyword = {"if",      "elif",   "else",   "while", "for",
                                                           "in",      "not",    "and",    "or",    "return",
                                                           "yield",   "assert", "del",    "with",  "as",
                                                           "import",  "from",   "lambda", "is",    "raise",
                                                           "except",  "await",  "case",   "match", "global",
                                                           "nonlocal"};

  const std::string s = unify_newlines(source);
  CodeStats stats;
  std::vector<int> indents = {0};
  std::vector<Token> line_tokens;
  int bracket_depth = 0;
  bool at_line_start = true;
  int line_indent = 0;

  auto end_logical_line = [&]() {
    if (line_tokens.empty()) return;
    ++stats.lines;
    ++stats.statements;
    while (line_indent < indents.back() && indents.size() > 1) indents.pop_back();
    if (line_indent > indents.back()) indents.push_back(line_indent);
    stats.max_nesting = std::max(stats.max_nesting, static_cast<int>(indents.size()) - 1);
    for (std::size_t k = 0; k < line_tokens.size(); ++k) {
      const Token& t = line_tokens[k];
      ++stats.tokens;
      if (t.kind == Tok::Name) {
        if (kBranch.count(t.text)) ++stats.branches;
        if (kLoop.count(t.text)) ++stats.loops;
        if (kFunction.count(t.text)) ++stats.functions;
      } else if (t.kind == Tok::Op) {
        if (t.text == ";" && k + 1 < line_tokens.size()) ++stats.statements;
        if (t.text == "(" && k > 0) {
          const Token& prev = line_tokens[k - 1];
          bool call = (prev.kind == Tok::Name && !kKeyword.count(prev.text)) ||
                      (prev.kind == Tok::Op && (prev.text == ")" || prev.text == "]"));
          // `def f(` is a definition, not a call.
          if (call && k >= 2 && line_tokens[k - 2].kind == Tok::Name &&
              (line_tokens[k - 2].text == "def" || line_tokens[k - 2].text == "class"))
            call = false;
          if (call) ++stats.calls;
        }
      }
    }
    line_tokens.clear();
  };

  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (at_line_start) {
      int width = 0;
      while (i < s.size() && is_blank(s[i])) {
        width += s[i] == '\t' ? 8 - (width % 8) : 1;
        ++i;
      }
      line_indent = width;
      at_line_start = false;
      continue;
    }
    if (c == '\n') {
      ++i;
      if (bracket_depth > 0) continue;  // implicit continuation inside brackets
      end_logical_line();
      at_line_start = true;
    } else if (is_blank(c)) {
      ++i;
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;  // explicit continuation
    } else if (c == '\'' || c == '"') {
      const std::size_t n = string_literal_length(s, i);
      line_tokens.push_back({Tok::String, ""});
      i += n;
    } else if (is_name_start(c)) {
      std::size_t j = i;
      while (j < s.size() && is_name_char(s[j])) ++j;
      // A string prefix (r"", f'', b"""...) belongs to the literal.
      if (j < s.size() && (s[j] == '\'' || s[j] == '"') && j - i <= 2) {
        const std::size_t n = string_literal_length(s, j);
        line_tokens.push_back({Tok::String, ""});
        i = j + n;
        continue;
      }
      line_tokens.push_back({Tok::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      std::size_t j = i;
      while (j < s.size() && (is_name_char(s[j]) || s[j] == '.' ||
                              ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))
        ++j;
      line_tokens.push_back({Tok::Number, ""});
      i = j;
    } else {
      if (c == '(' || c == '[' || c == '{') ++bracket_depth;
      if ((c == ')' || c == ']' || c == '}') && bracket_depth > 0) --bracket_depth;
      line_tokens.push_back({Tok::Op, std::string(1, c)});
      ++i;
    }
  }
  end_logical_line();
  return stats;
}

double complexity(std::string_view source) {
  const CodeStats st = code_stats(source);
  return st.statements + 2.0 * st.branches + 3.0 * st.loops + st.calls + 2.0 * st.functions +
         4.0 * st.max_nesting + st.tokens / 20.0;
}

}  // namespace kernelsmith
