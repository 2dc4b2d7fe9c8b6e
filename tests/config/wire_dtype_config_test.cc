// ps.wire_dtype: read from the file, round-tripped by to_toml, unknown names
// refused (tests/cluster/wire_dtype_test.cc: the worker's mapping).
#include <doctest/doctest.h>

#include <string>

#include "common/config/config.h"
#include "common/base/errors.h"

using namespace pstrain;

TEST_CASE("ps.wire_dtype: default float32, bfloat16 read and round-tripped, others refused") {
  CHECK(parse_config("", "d.toml").ps.wire_dtype == "float32");
  const RunConfig c = parse_config("[ps]\nwire_dtype = \"bfloat16\"\n", "b.toml");
  CHECK(c.ps.wire_dtype == "bfloat16");
  CHECK(parse_config(to_toml(c), "rt.toml").ps == c.ps);
  std::string error;
  try {
    parse_config("[ps]\nwire_dtype = \"float16\"\n", "bad.toml");
  } catch (const ConfigError& e) {
    error = e.what();
  }
  CHECK(error.find("wire_dtype") != std::string::npos);
  CHECK(error.find("float16") != std::string::npos);
}
