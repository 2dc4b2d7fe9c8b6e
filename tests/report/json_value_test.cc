// The strict JSON reader: what it accepts and the errors for what it rejects.
#include <doctest/doctest.h>

#include <cstring>
#include <cmath>
#include <string>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "tools/report/json_value.h"
#include "tests/support/throw_text.h"

using pstrain::DataError;
using pstrain::report::JsonValue;
using pstrain::report::parse_json;

namespace {

std::string error_of(const std::string& text) {
  return pstrain::test::thrown_text<DataError>([&] { parse_json(text, "f.jsonl:3"); });
}

}  // namespace

TEST_CASE("parse_json reads a flat metrics object") {
  const JsonValue v = parse_json(R"({"type":"step","time_s":1.5e-1,"step":12,"loss":null,"simulated":false})", "x");
  REQUIRE(v.kind() == JsonValue::Kind::kObject);
  CHECK(v.keys().size() == 5);
  CHECK(v.find("type")->as_string("type") == "step");
  CHECK(v.find("time_s")->as_number("time_s") == doctest::Approx(0.15));
  CHECK(v.find("step")->as_integer("step") == 12);
  CHECK(v.find("loss")->is_null());
  CHECK(v.find("simulated")->as_bool("simulated") == false);
  CHECK(v.find("absent") == nullptr);
}

TEST_CASE("parse_json reads nested objects, arrays, escapes and negative numbers") {
  const JsonValue v = parse_json(
      " { \"h\" : {\"0\": 3, \"1\": 4}, \"a\": [1, -2.5, \"x\", true, []], \"s\": \"q\\\"\\\\\\n\\u00e9\\ud83d\\ude00\" } ",
      "x");
  CHECK(v.find("h")->find("1")->as_integer("h.1") == 4);
  REQUIRE(v.find("a")->items().size() == 5);
  CHECK(v.find("a")->items()[1].as_number("a[1]") == -2.5);
  CHECK(v.find("a")->items()[4].items().empty());
  CHECK(v.find("s")->as_string("s") == "q\"\\\n\xc3\xa9\xf0\x9f\x98\x80");
}

TEST_CASE("parse_json rejects what strict JSON forbids, saying where") {
  CHECK(error_of(R"({"a":1,})") == "f.jsonl:3: column 8: expected a key string, found '}'");
  CHECK(error_of(R"({"a":1,"a":2})") == "f.jsonl:3: column 11: duplicate key 'a'");
  CHECK(error_of(R"({"a":01})") == "f.jsonl:3: column 7: leading zero in a number");
  CHECK(error_of(R"({"a":1} x)") == "f.jsonl:3: column 9: unexpected text after the value");
  CHECK(error_of("{\"a\":\"abc") == "f.jsonl:3: column 10: unterminated string");
  CHECK(error_of(R"({"a":"\q"})") == "f.jsonl:3: column 8: bad escape in a string");
  CHECK(error_of("{\"a\":\"\t\"}") == "f.jsonl:3: column 7: control character in a string");
  CHECK(error_of(R"({"a":NaN})") == "f.jsonl:3: column 6: expected a JSON value, found 'N'");
  CHECK(error_of(R"({"a":tru})") == "f.jsonl:3: column 6: expected a JSON value, found 't'");
  CHECK(error_of(R"({"a":1.})") == "f.jsonl:3: column 8: expected a digit, found '}'");
  CHECK(error_of(R"({"a":1e999})") == "f.jsonl:3: column 6: number 1e999 is out of range");
  CHECK(error_of(R"({"a":"\ud83d"})") == "f.jsonl:3: column 13: unpaired surrogate in \\u escape");
  CHECK(error_of(R"({"a" 1})") == "f.jsonl:3: column 6: expected ':', found '1'");
  CHECK(error_of("") == "f.jsonl:3: column 1: expected a JSON value, found the end of the text");
  CHECK(error_of(std::string(40, '[') + std::string(40, ']')) == "f.jsonl:3: column 34: nesting deeper than 32 levels");
}

TEST_CASE("typed access names the key and the kind found") {
  const JsonValue v = parse_json(R"({"n":1.5,"s":"x"})", "x");
  CHECK_THROWS_WITH_AS(v.find("n")->as_integer("key 'n'"), "key 'n': expected an integer, got 1.500000", DataError);
  CHECK_THROWS_WITH_AS(v.find("s")->as_number("key 's'"), "key 's': expected a number, got a string", DataError);
  CHECK_THROWS_WITH_AS(v.find("n")->as_bool("key 'n'"), "key 'n': expected a boolean, got a number", DataError);
  CHECK_THROWS_WITH_AS(v.find("n")->as_string("key 'n'"), "key 'n': expected a string, got a number", DataError);
}

TEST_CASE("JsonLine writes doubles that the reader gets back bit for bit") {
  // %.9g (the old format) round-trips a float, not a double: 0.1 + 0.2 and
  // 1/3 would come back a few ulps off. Every value here must come back exact.
  const double values[] = {0.1 + 0.2, 1.0 / 3.0, 6.02214076e23, -2.2250738585072014e-308,
                           4.9406564584124654e-324, 1.7976931348623157e308, 123456789.123456789,
                           -0.0, 0.0, 1.0, 1e-7, 3.0};
  for (const double x : values) {
    const std::string text = pstrain::JsonLine().add("x", x).str();
    const JsonValue v = parse_json(text, "round trip");
    const double back = v.find("x")->as_number("x");
    INFO(text);
    CHECK(std::memcmp(&back, &x, sizeof(double)) == 0);
  }
  CHECK(pstrain::JsonLine().add("x", std::nan("")).str() == R"({"x":null})");
}
