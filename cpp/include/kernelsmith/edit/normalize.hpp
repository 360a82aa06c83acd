// Normalized form and hash of Python-like source code, plus a structural
// complexity measure. The engine uses them for duplicate rejection (seen())
// and the "complexity" feature dimension; curation and edits may reuse them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kernelsmith {

// Normalization rules (chosen so that only changes that cannot alter a Python
// program's meaning are erased):
//  * `#` comments outside string literals are removed;
//  * trailing whitespace is stripped and blank lines (outside string
//    literals) are dropped;
//  * "\r\n" and "\r" become "\n";
//  * inside a line, after its indentation, runs of spaces and tabs collapse to
//    one space (outside string literals);
//  * leading indentation is kept verbatim (it is syntax in Python);
//  * string literals (', ", ''', """, with backslash escapes) are kept
//    byte for byte, including blank lines inside triple-quoted strings.
// Docstrings are string literals and therefore count as code.
std::string normalize_source(std::string_view source);

// 64-bit FNV-1a of normalize_source(source). Stable across platforms/runs.
std::uint64_t normalized_hash(std::string_view source);

// 64-bit FNV-1a of raw bytes (also used for checkpoint checksums).
std::uint64_t fnv1a64(std::string_view bytes);

// Counts from a light tokenizer of Python-like source (comments and string
// literal contents are ignored).
struct CodeStats {
  int lines = 0;        // non-blank logical lines
  int statements = 0;   // lines + ';'-separated extra statements
  int branches = 0;     // if / elif / else / try / except / and / or / ternary
  int loops = 0;        // for / while / comprehension `for`
  int calls = 0;        // identifier or ')' / ']' directly followed by '('
  int functions = 0;    // def / lambda
  int max_nesting = 0;  // deepest indentation level (in indent steps)
  int tokens = 0;       // identifiers, numbers, strings and operators
};

CodeStats code_stats(std::string_view source);

// Structural complexity: statements + 2*branches + 3*loops + calls +
// 2*functions + 4*max_nesting + tokens/20. Code that adds structure (a
// loop, a nested block, a call) grows it faster than code that only grows
// long, so two kernels of equal length but different shape land in
// different cells.
double complexity(std::string_view source);

}  // namespace kernelsmith
