#include <gtest/gtest.h>

#include "kernelsmith/edit/normalize.hpp"

namespace ks = kernelsmith;

TEST(Normalize, CommentsBlankLinesAndSpacesDoNotMakeCodeNew) {
  const std::string a = "def f(x):\n    return x + 1\n";
  const std::string b = "# header\n\ndef f(x):   # trailing comment\n    return x   +  1   \n\n\n";
  EXPECT_EQ(ks::normalize_source(a), ks::normalize_source(b));
  EXPECT_EQ(ks::normalized_hash(a), ks::normalized_hash(b));
  EXPECT_EQ(ks::normalized_hash("x = 1\r\ny = 2\r\n"), ks::normalized_hash("x = 1\ny = 2\n"));
}

TEST(Normalize, IndentationAndStringsAreKept) {
  // Different indentation is a different Python program.
  EXPECT_NE(ks::normalized_hash("if a:\n    b()\nc()\n"), ks::normalized_hash("if a:\n    b()\n    c()\n"));
  // '#' and spacing inside string literals are data, not comments.
  EXPECT_NE(ks::normalized_hash("s = 'a # b'\n"), ks::normalized_hash("s = 'a '\n"));
  EXPECT_NE(ks::normalized_hash("s = 'a  b'\n"), ks::normalized_hash("s = 'a b'\n"));
  EXPECT_EQ(ks::normalize_source("s = \"x\\\" # y\"  # real\n"), "s = \"x\\\" # y\"\n");
  // Blank lines inside a triple-quoted string are kept.
  EXPECT_EQ(ks::normalize_source("d = '''a\n\nb'''\n"), "d = '''a\n\nb'''\n");
  EXPECT_NE(ks::normalized_hash("x = 1\n"), ks::normalized_hash("x = 2\n"));
}

TEST(Complexity, CountsStructureNotOnlyLength) {
  const std::string flat = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\n";
  const std::string nested = "for i in range(n):\n    if x[i] > 0:\n        y(i)\n";
  const auto st = ks::code_stats(nested);
  EXPECT_EQ(st.loops, 1);
  EXPECT_EQ(st.branches, 1);
  EXPECT_EQ(st.calls, 2);  // range( and y(
  EXPECT_EQ(st.max_nesting, 2);
  EXPECT_EQ(st.statements, 3);
  EXPECT_GT(ks::complexity(nested), ks::complexity(flat));
  // Comments and strings do not add structure.
  EXPECT_DOUBLE_EQ(ks::complexity(nested),
                   ks::complexity("# for while if\n" + nested + "s = 0\n") - ks::complexity("s = 0\n"));
  EXPECT_EQ(ks::code_stats("s = 'for if while f(x)'\n").loops, 0);
  EXPECT_EQ(ks::code_stats("def g(a):\n    return (a)\n").calls, 0);
}
