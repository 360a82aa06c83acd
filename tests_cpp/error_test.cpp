#include <gtest/gtest.h>

#include "kernelsmith/error.hpp"

namespace ks = kernelsmith;

TEST(Error, RequireThrowsInvalidArgumentWithLocation) {
  int islands = 0;
  try {
    KS_REQUIRE(islands > 0, "islands must be >= 1, got " << islands);
    FAIL() << "KS_REQUIRE did not throw";
  } catch (const ks::InvalidArgument& e) {
    EXPECT_EQ(e.message(), "islands must be >= 1, got 0");
    EXPECT_NE(std::string(e.what()).find("error_test.cpp"), std::string::npos);
  }
}

TEST(Error, HierarchyDerivesFromError) {
  EXPECT_THROW(KS_THROW(ks::CorruptState, "bad checkpoint"), ks::Error);
  EXPECT_NO_THROW(KS_REQUIRE(true, "never"));
}
