// Code edits for evolution: EVOLVE-BLOCK markers, SEARCH/REPLACE diffs and
// full rewrites extracted from fenced code in a model's response.
//
// A program marks the regions a proposer may change with comment lines
//
//     # EVOLVE-BLOCK-START
//     ...evolvable code...
//     # EVOLVE-BLOCK-END
//
// (`//` comments are accepted too). Several blocks may appear; they may not
// nest. A program without any marker is evolvable as a whole. Everything
// outside the blocks, the marker lines included, is fixed: an edit that
// changes it is rejected with a message that says where.
//
// Every failure here is an *outcome*, not an exception, because the message
// goes back to the model as feedback. Exceptions are reserved for bad
// arguments from the caller (e.g. an unknown mode name).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kernelsmith::edit {

// One evolvable region; line numbers are 1-based and name the marker lines.
// The evolvable content is the lines strictly between start_line and end_line.
struct EvolveBlock {
  int start_line = 0;
  int end_line = 0;
};

struct BlockParse {
  bool ok = true;
  std::vector<EvolveBlock> blocks;
  std::string error;  // empty when ok
};

// Finds the EVOLVE-BLOCK markers. Malformed input (nested START, END without
// START, START never closed, a marker sharing its line with code) gives
// ok=false and an error naming the offending line numbers.
BlockParse parse_evolve_blocks(const std::string& source);

struct EnforceResult {
  bool ok = true;
  std::string error;    // for the model: which fixed region changed and where
  int parent_line = 0;  // first differing line in the parent (1-based, 0 if n/a)
  int child_line = 0;   // the corresponding line in the child
};

// Checks that `child` differs from `parent` only inside the parent's
// EVOLVE blocks: same number of blocks, identical fixed regions (trailing
// whitespace and trailing blank lines at the end of the file are ignored).
EnforceResult check_evolve_blocks(const std::string& parent, const std::string& child);

// One SEARCH/REPLACE block as written by the model.
struct DiffBlock {
  std::string search;
  std::string replace;
  int response_line = 0;  // 1-based line of the SEARCH marker in the response
  bool well_formed = true;
  std::string error;  // why the block is malformed
};

// Parses `<<<<<<< SEARCH` / `=======` / `>>>>>>> REPLACE` blocks (5 to 9
// marker characters accepted). A block missing its divider or its end is
// returned with well_formed=false so it can be reported.
std::vector<DiffBlock> parse_diff_blocks(const std::string& response);

// How one diff block fared.
struct BlockOutcome {
  int index = 0;  // 0-based position in the response
  int response_line = 0;
  std::string status;       // applied | no_match | ambiguous | outside_blocks | malformed | empty_search
  std::string match_level;  // exact | trailing_whitespace | indentation | whitespace ("" if not applied)
  int start_line = 0;       // matched lines (1-based, in the text the block was applied to)
  int end_line = 0;
  int nearest_start = 0;  // nearest match when status != applied (0 if none)
  int nearest_end = 0;
  double similarity = 0.0;  // of the nearest match, in [0, 1]
  std::string message;      // for the model
  bool applied() const { return status == "applied"; }
};

struct DiffResult {
  std::string source;  // the text after every block that applied
  std::vector<BlockOutcome> blocks;
  int applied = 0;
  int failed = 0;
};

// Applies diff blocks in order, each to the text left by the previous ones.
// Matching is tried at increasing tolerance and stops at the first level
// with a match: exact lines, then trailing whitespace ignored, then
// indentation ignored (the replacement is re-indented by the same offset),
// then all whitespace runs collapsed and blank lines ignored. Matches outside
// the EVOLVE blocks of the text are rejected; several matches at the same
// level are reported as ambiguous. A block that does not apply gets the
// nearest region (line range, similarity, first differing line).
DiffResult apply_diff(const std::string& source, const std::vector<DiffBlock>& blocks);

struct FencedCode {
  bool found = false;
  std::string code;
  std::string language;  // as written after the opening fence, lower-cased
  int index = -1;        // which fence was picked (0-based)
  int count = 0;         // how many fences the response holds
  int start_line = 0;    // 1-based line of the opening fence
  bool closed = true;    // false when the response ended inside the fence
};

// Picks the fenced block holding the program. Rule, in order: among python
// fences (```python, ```py, or no language) or, if there are none, all
// fences: those defining `class ModelNew`; else those with an EVOLVE-BLOCK
// marker; else all. Among the remaining, the longest; ties go to the last.
// An unclosed final fence (a truncated reply) runs to the end of the text.
FencedCode extract_fenced_code(const std::string& response);

// Counts the similarity of two texts line by line: the mean over aligned
// lines of a Levenshtein ratio on the stripped lines, in [0, 1].
double line_similarity(const std::vector<std::string>& a, const std::vector<std::string>& b);

enum class EditMode { Diff, Full, Auto };
EditMode parse_edit_mode(const std::string& name);  // "diff" | "full" | "auto"

struct EditResult {
  bool ok = false;
  std::string mode;                        // the mode used: "diff" or "full"
  std::string source;                      // the candidate (partial for a failed diff)
  std::vector<BlockOutcome> blocks;        // diff mode only
  std::string error;                       // feedback for the model; empty when ok
  std::vector<EvolveBlock> evolve_blocks;  // of the candidate (when parseable)
  FencedCode fence;                        // full mode only
};

// The whole edit step: picks diff or full rewrite (auto: diff when the
// response holds a SEARCH marker), applies it to `parent`, and enforces the
// parent's EVOLVE blocks on the result. With allow_partial a diff in which
// some blocks failed still counts as ok when at least one applied (the
// failures stay in `blocks` and `error`). Line endings \r\n are read as \n.
EditResult apply_edit(const std::string& parent, const std::string& response, EditMode mode,
                      bool allow_partial = false);

}  // namespace kernelsmith::edit
