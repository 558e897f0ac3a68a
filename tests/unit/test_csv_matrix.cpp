// Numeric CSV reading for the GMM: header detection, and errors that name the line.
#include <gtest/gtest.h>

#include "detect/csv_matrix.h"
#include "util/error.h"

using eacgm::detect::parse_numeric_csv;

namespace {

// The message of the eacgm::Error that parsing `text` throws ("" if it does not throw).
std::string error_of(const std::string& text) {
  try {
    parse_numeric_csv(text, "data.csv");
  } catch (const eacgm::Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CsvMatrix, ReadsNumbersWithoutHeader) {
  auto t = parse_numeric_csv("1,2.5\n-3e2, +4\n", "x");
  EXPECT_TRUE(t.column_names.empty());
  ASSERT_EQ(t.values.rows(), 2);
  ASSERT_EQ(t.values.cols(), 2);
  EXPECT_EQ(t.values(0, 1), 2.5);
  EXPECT_EQ(t.values(1, 0), -300.0);
  EXPECT_EQ(t.values(1, 1), 4.0);
}

TEST(CsvMatrix, DetectsHeaderAndSkipsBlankLinesAndCarriageReturns) {
  auto t = parse_numeric_csv("duration, bytes\r\n\r\n1,2\r\n3,4\r\n\n", "x");
  ASSERT_EQ(t.column_names.size(), 2u);
  EXPECT_EQ(t.column_names[0], "duration");
  EXPECT_EQ(t.column_names[1], "bytes");
  ASSERT_EQ(t.values.rows(), 2);
  EXPECT_EQ(t.values(1, 0), 3.0);
}

TEST(CsvMatrix, BadFieldNamesLineAndColumn) {
  std::string e = error_of("a,b\n1,2\n3,x7\n");
  EXPECT_NE(e.find("data.csv line 3, column 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'x7' is not a number"), std::string::npos) << e;
}

TEST(CsvMatrix, EmptyFieldIsAnError) {
  std::string e = error_of("1,2\n3,\n");
  EXPECT_NE(e.find("line 2, column 2"), std::string::npos) << e;
}

TEST(CsvMatrix, InconsistentColumnCountNamesBothLines) {
  std::string e = error_of("1,2,3\n4,5,6\n7,8\n");
  EXPECT_NE(e.find("line 3: 2 columns, but line 1 has 3"), std::string::npos) << e;
}

TEST(CsvMatrix, NanAndInfinityAreRejected) {
  EXPECT_NE(error_of("1,2\nnan,3\n").find("line 2, column 1: 'nan' is not finite"),
            std::string::npos);
  EXPECT_NE(error_of("1,2\n3,-inf\n").find("line 2, column 2: '-inf' is not finite"),
            std::string::npos);
  EXPECT_NE(error_of("1,1e999\n").find("line 1, column 2: '1e999' is not finite"),
            std::string::npos);
  EXPECT_EQ(parse_numeric_csv("1e-999\n", "x").values(0, 0), 0.0);  // underflow is fine
}

TEST(CsvMatrix, EmptyFileAndHeaderOnlyHaveNoDataRows) {
  EXPECT_NE(error_of("").find("no data rows"), std::string::npos);
  EXPECT_NE(error_of("\n\n").find("no data rows"), std::string::npos);
  EXPECT_NE(error_of("a,b\n").find("no data rows"), std::string::npos);
}

TEST(CsvMatrix, FirstRowMixingNumbersAndTextIsAnError) {
  std::string e = error_of("1,b\n2,3\n");
  EXPECT_NE(e.find("line 1: mixes numbers and text"), std::string::npos) << e;
}

TEST(CsvMatrix, MissingFileNamesThePath) {
  try {
    eacgm::detect::read_numeric_csv("/nonexistent/eacgm.csv");
    FAIL() << "no error";
  } catch (const eacgm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read /nonexistent/eacgm.csv"), std::string::npos);
  }
}
