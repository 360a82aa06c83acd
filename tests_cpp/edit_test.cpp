#include <gtest/gtest.h>

#include <string>

#include "kernelsmith/edit/edit.hpp"
#include "kernelsmith/error.hpp"

namespace ke = kernelsmith::edit;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Lines: 1 import, 2 START, 3 class, 4 def, 5 y=, 6 return, 7 END, 8 blank, 9 def get_inputs, 10 return
const std::string kParent =
    "import torch\n"
    "# EVOLVE-BLOCK-START\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        y = x + 1\n"
    "        return y\n"
    "# EVOLVE-BLOCK-END\n"
    "\n"
    "def get_inputs():\n"
    "    return [torch.randn(4)]\n";

std::string diff(const std::string& search, const std::string& replace) {
  return "<<<<<<< SEARCH\n" + search + "=======\n" + replace + ">>>>>>> REPLACE\n";
}

}  // namespace

TEST(EvolveBlocks, ParsesSeveralBlocks) {
  const auto r = ke::parse_evolve_blocks(
      "a\n# EVOLVE-BLOCK-START\nb\n# EVOLVE-BLOCK-END\nc\n  // EVOLVE-BLOCK-START\nd\n  // EVOLVE-BLOCK-END\n");
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.blocks.size(), 2u);
  EXPECT_EQ(r.blocks[0].start_line, 2);
  EXPECT_EQ(r.blocks[0].end_line, 4);
  EXPECT_EQ(r.blocks[1].start_line, 6);
  EXPECT_EQ(r.blocks[1].end_line, 8);
}

TEST(EvolveBlocks, NoMarkersMeansNoBlocks) {
  const auto r = ke::parse_evolve_blocks("x = 1\n");
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.blocks.empty());
}

TEST(EvolveBlocks, MalformedMarkersNameTheLines) {
  auto nested =
      ke::parse_evolve_blocks("# EVOLVE-BLOCK-START\na\n# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n");
  EXPECT_FALSE(nested.ok);
  EXPECT_TRUE(contains(nested.error, "line 3")) << nested.error;
  EXPECT_TRUE(contains(nested.error, "opened at line 1")) << nested.error;

  auto stray_end = ke::parse_evolve_blocks("a\n# EVOLVE-BLOCK-END\n");
  EXPECT_FALSE(stray_end.ok);
  EXPECT_TRUE(contains(stray_end.error, "line 2")) << stray_end.error;
  EXPECT_TRUE(contains(stray_end.error, "without a matching")) << stray_end.error;

  auto unclosed = ke::parse_evolve_blocks("a\n# EVOLVE-BLOCK-START\nb\n");
  EXPECT_FALSE(unclosed.ok);
  EXPECT_TRUE(contains(unclosed.error, "never closed")) << unclosed.error;

  auto inline_marker = ke::parse_evolve_blocks("x = 1  # EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n");
  EXPECT_FALSE(inline_marker.ok);
  EXPECT_TRUE(contains(inline_marker.error, "alone on a comment line")) << inline_marker.error;
}

TEST(Enforce, AcceptsChangesInsideBlocks) {
  std::string child = kParent;
  child.replace(child.find("x + 1"), 5, "x * 2 + 1\n        y = y - 0");
  const auto r = ke::check_evolve_blocks(kParent, child);
  EXPECT_TRUE(r.ok) << r.error;
}

TEST(Enforce, RejectsChangeOutsideWithLocation) {
  std::string child = kParent;
  child.replace(child.find("randn(4)"), 8, "randn(8)");
  const auto r = ke::check_evolve_blocks(kParent, child);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.parent_line, 10);
  EXPECT_EQ(r.child_line, 10);
  EXPECT_TRUE(contains(r.error, "after the last EVOLVE block")) << r.error;
  EXPECT_TRUE(contains(r.error, "randn(4)")) << r.error;
  EXPECT_TRUE(contains(r.error, "randn(8)")) << r.error;
  EXPECT_TRUE(contains(r.error, "lines 2-7")) << r.error;
}

TEST(Enforce, LineNumbersFollowAGrownBlock) {
  // The block grows by two lines; the change after it is still found at the
  // right parent and child lines.
  std::string child = kParent;
  child.replace(child.find("        return y"), 16, "        y = y + 0\n        y = y + 0\n        return y");
  child.replace(child.find("def get_inputs"), 14, "def get_inputz");
  const auto r = ke::check_evolve_blocks(kParent, child);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.parent_line, 9);
  EXPECT_EQ(r.child_line, 11);
}

TEST(Enforce, RejectsRemovedMarkersAndMissingLines) {
  std::string child = kParent;
  child.erase(child.find("# EVOLVE-BLOCK-END\n"), 19);
  auto r = ke::check_evolve_blocks(kParent, child);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "malformed") || contains(r.error, "EVOLVE block(s)")) << r.error;

  std::string shorter = kParent;
  shorter.erase(shorter.find("import torch\n"), 13);
  r = ke::check_evolve_blocks(kParent, shorter);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "before the first EVOLVE block")) << r.error;
}

TEST(Enforce, IgnoresTrailingWhitespaceAndFinalBlankLines) {
  std::string child = kParent;
  child.replace(child.find("import torch\n"), 13, "import torch   \n");
  child += "\n\n";
  EXPECT_TRUE(ke::check_evolve_blocks(kParent, child).ok);
}

TEST(DiffParse, ParsesBlocksAndFlagsMalformed) {
  const std::string response = "intro\n" + diff("a\n", "b\n") + "text\n<<<<<<< SEARCH\nc\n>>>>>>> REPLACE\n";
  const auto blocks = ke::parse_diff_blocks(response);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_TRUE(blocks[0].well_formed);
  EXPECT_EQ(blocks[0].search, "a");
  EXPECT_EQ(blocks[0].replace, "b");
  EXPECT_EQ(blocks[0].response_line, 2);
  EXPECT_FALSE(blocks[1].well_formed);
  EXPECT_TRUE(contains(blocks[1].error, "=======")) << blocks[1].error;
}

TEST(DiffApply, ExactMatch) {
  const auto r =
      ke::apply_edit(kParent, diff("        y = x + 1\n", "        y = x + 2\n"), ke::EditMode::Diff);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.blocks.size(), 1u);
  EXPECT_EQ(r.blocks[0].match_level, "exact");
  EXPECT_EQ(r.blocks[0].start_line, 5);
  EXPECT_TRUE(contains(r.source, "        y = x + 2\n"));
  EXPECT_FALSE(contains(r.source, "x + 1"));
}

TEST(DiffApply, TrailingWhitespaceTolerated) {
  const auto r =
      ke::apply_edit(kParent, diff("        y = x + 1   \n", "        y = x + 2\n"), ke::EditMode::Diff);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.blocks[0].match_level, "trailing_whitespace");
}

TEST(DiffApply, IndentationDifferenceReindentsReplacement) {
  // The model dropped the class-level indentation; the replacement is put
  // back at the indentation the file uses.
  const auto r = ke::apply_edit(kParent,
                                diff("def forward(self, x):\n    y = x + 1\n",
                                     "def forward(self, x):\n    z = x\n    y = z + 1\n"),
                                ke::EditMode::Diff);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.blocks[0].match_level, "indentation");
  EXPECT_TRUE(contains(r.source, "    def forward(self, x):\n        z = x\n        y = z + 1\n"))
      << r.source;
}

TEST(DiffApply, CollapsedWhitespaceAndBlankLines) {
  const auto r = ke::apply_edit(kParent,
                                diff("y  =  x +   1\n\n        return   y\n", "        return x + 1\n"),
                                ke::EditMode::Diff);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.blocks[0].match_level, "whitespace");
  EXPECT_TRUE(contains(r.source, "    def forward(self, x):\n        return x + 1\n# EVOLVE-BLOCK-END"))
      << r.source;
}

TEST(DiffApply, FailedBlockReportsNearestMatch) {
  const auto r = ke::apply_edit(kParent,
                                diff("        y = x + 100\n        return y\n", "        return x\n"),
                                ke::EditMode::Diff);
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.blocks.size(), 1u);
  const auto& b = r.blocks[0];
  EXPECT_EQ(b.status, "no_match");
  EXPECT_EQ(b.nearest_start, 5);
  EXPECT_EQ(b.nearest_end, 6);
  EXPECT_GT(b.similarity, 0.8);
  EXPECT_LT(b.similarity, 1.0);
  EXPECT_TRUE(contains(b.message, "lines 5-6")) << b.message;
  EXPECT_TRUE(contains(b.message, "x + 100")) << b.message;
  EXPECT_TRUE(contains(r.error, "0 of 1")) << r.error;
  // Nothing applied: the source is the parent.
  EXPECT_EQ(r.source, kParent);
}

TEST(DiffApply, PartialApplicationOnlyWhenAllowed) {
  const std::string response = diff("        y = x + 1\n", "        y = x + 3\n") +
                               diff("nothing like this\n", "x\n");
  auto strict = ke::apply_edit(kParent, response, ke::EditMode::Diff, false);
  EXPECT_FALSE(strict.ok);
  EXPECT_TRUE(contains(strict.source, "x + 3"));
  EXPECT_EQ(strict.blocks[0].status, "applied");
  EXPECT_EQ(strict.blocks[1].status, "no_match");
  auto partial = ke::apply_edit(kParent, response, ke::EditMode::Diff, true);
  EXPECT_TRUE(partial.ok);
  EXPECT_TRUE(contains(partial.error, "1 of 2")) << partial.error;
}

TEST(DiffApply, SearchOutsideBlocksRejected) {
  const auto r = ke::apply_edit(kParent,
                                diff("    return [torch.randn(4)]\n", "    return [torch.randn(8)]\n"),
                                ke::EditMode::Diff);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.blocks[0].status, "outside_blocks");
  EXPECT_TRUE(contains(r.blocks[0].message, "lines 10-10")) << r.blocks[0].message;
  EXPECT_FALSE(contains(r.source, "randn(8)"));
}

TEST(DiffApply, SearchIncludingAMarkerRejected) {
  const auto r = ke::apply_edit(kParent, diff("        return y\n# EVOLVE-BLOCK-END\n", "        return y\n"),
                                ke::EditMode::Diff);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.blocks[0].status, "outside_blocks");
}

TEST(DiffApply, AmbiguousMatchReported) {
  const std::string parent = "# EVOLVE-BLOCK-START\na = 1\nb = 2\na = 1\n# EVOLVE-BLOCK-END\n";
  const auto r = ke::apply_edit(parent, diff("a = 1\n", "a = 3\n"), ke::EditMode::Diff);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.blocks[0].status, "ambiguous");
  EXPECT_TRUE(contains(r.blocks[0].message, "lines 2-2, 4-4")) << r.blocks[0].message;
}

TEST(DiffApply, MatchInsideBlockPreferredOverCopyOutside) {
  const std::string parent = "a = 1\n# EVOLVE-BLOCK-START\na = 1\n# EVOLVE-BLOCK-END\n";
  const auto r = ke::apply_edit(parent, diff("a = 1\n", "a = 2\n"), ke::EditMode::Diff);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.source, "a = 1\n# EVOLVE-BLOCK-START\na = 2\n# EVOLVE-BLOCK-END\n");
}

TEST(DiffApply, LaterBlocksSeeEarlierEdits) {
  const std::string response = diff("        y = x + 1\n", "        y = x + 1\n        y = y * 2\n") +
                               diff("        y = y * 2\n", "        y = y * 3\n");
  const auto r = ke::apply_edit(kParent, response, ke::EditMode::Diff);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(contains(r.source, "y = y * 3"));
}

TEST(DiffApply, NoBlocksInDiffModeIsAnError) {
  const auto r = ke::apply_edit(kParent, "I think it is fine.", ke::EditMode::Diff);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "SEARCH/REPLACE")) << r.error;
}

TEST(Fenced, PicksTheFenceDefiningModelNew) {
  const std::string response =
      "Plan:\n```python\nprint('helper')\nx = 1\ny = 2\nz = 3\n```\nand\n```python\nclass ModelNew:\n    pass\n```\n"
      "```bash\necho this is a long shell line that is longer than everything else\n```\n";
  const auto f = ke::extract_fenced_code(response);
  ASSERT_TRUE(f.found);
  EXPECT_EQ(f.count, 3);
  EXPECT_EQ(f.index, 1);
  EXPECT_EQ(f.code, "class ModelNew:\n    pass\n");
  EXPECT_EQ(f.language, "python");
  EXPECT_TRUE(f.closed);
}

TEST(Fenced, LongestThenLastAndUnclosed) {
  auto f = ke::extract_fenced_code("```\na\n```\n```py\nbb\n```\n```python\ncc\n```\n");
  EXPECT_EQ(f.index, 2);  // tie on length goes to the last
  EXPECT_EQ(f.code, "cc\n");
  f = ke::extract_fenced_code("```python\nclass ModelNew:\n    x = 1\n");
  EXPECT_TRUE(f.found);
  EXPECT_FALSE(f.closed);
  EXPECT_EQ(f.code, "class ModelNew:\n    x = 1\n");
  EXPECT_FALSE(ke::extract_fenced_code("no code here").found);
}

TEST(FullRewrite, AppliesAndEnforces) {
  std::string child = kParent;
  child.replace(child.find("x + 1"), 5, "x - 1");
  auto r = ke::apply_edit(kParent, "Here:\n```python\n" + child + "```\n", ke::EditMode::Auto);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.mode, "full");
  EXPECT_EQ(r.source, child);
  ASSERT_EQ(r.evolve_blocks.size(), 1u);

  std::string bad = child;
  bad.replace(bad.find("import torch"), 12, "import numpy");
  r = ke::apply_edit(kParent, "```python\n" + bad + "```", ke::EditMode::Full);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "line 1 of the current program is `import torch`")) << r.error;
}

TEST(FullRewrite, AutoPicksDiffWhenSearchMarkersPresent) {
  const auto r =
      ke::apply_edit(kParent, diff("        y = x + 1\n", "        y = x + 5\n"), ke::EditMode::Auto);
  EXPECT_EQ(r.mode, "diff");
  EXPECT_TRUE(r.ok) << r.error;
}

TEST(FullRewrite, CrLfResponsesAreNormalized) {
  std::string child = kParent;
  std::string crlf;
  for (char c : child) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  const auto r = ke::apply_edit(kParent, "```python\r\n" + crlf + "```\r\n", ke::EditMode::Full);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.source, kParent);
}

TEST(Mode, UnknownModeIsInvalidArgument) {
  EXPECT_THROW(ke::parse_edit_mode("patch"), kernelsmith::InvalidArgument);
  EXPECT_EQ(ke::parse_edit_mode("auto"), ke::EditMode::Auto);
}

TEST(Similarity, LineSimilarityBounds) {
  EXPECT_DOUBLE_EQ(ke::line_similarity({"a b"}, {"  a b"}), 1.0);
  EXPECT_DOUBLE_EQ(ke::line_similarity({"abc"}, {"xyz"}), 0.0);
  const double half = ke::line_similarity({"abc", "def"}, {"abc"});
  EXPECT_DOUBLE_EQ(half, 0.5);
}

TEST(Enforce, ParentWithNothingOutsideItsBlocksMayBeReplacedWhole) {
  // The reference wrapped for a translation step: the child brings its own layout.
  const std::string parent = "# EVOLVE-BLOCK-START\nclass ModelNew:\n    pass\n# EVOLVE-BLOCK-END\n\n";
  const std::string child = "import triton\n# EVOLVE-BLOCK-START\nBLOCK = 64\n# EVOLVE-BLOCK-END\nx = 1\n";
  EXPECT_TRUE(ke::check_evolve_blocks(parent, child).ok);
  // One fixed line outside the block is enough to enforce the layout again.
  const std::string fixed = "import torch\n" + parent;
  EXPECT_FALSE(ke::check_evolve_blocks(fixed, child).ok);
}
