// ps.apply_threads and ps.apply_split_bytes (server/parallel_apply.h): the
// defaults, read and round-tripped by to_toml, out-of-range values refused
// with the file, line, key and what is allowed.
#include <doctest/doctest.h>

#include <string>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

std::string error_of(const std::string& text) {
  return pstrain::test::thrown_text<ConfigError>([&] { parse_config(text, "bad.toml"); });
}

}  // namespace

TEST_CASE("ps.apply_threads, ps.apply_split_bytes: defaults, read, round-tripped") {
  const RunConfig d = parse_config("", "d.toml");
  CHECK(d.ps.apply_threads == 0);  // the host's cores shared among its servers
  CHECK(d.ps.apply_split_bytes == 131072);
  const RunConfig c = parse_config("[ps]\napply_threads = 4\napply_split_bytes = 4096\n", "c.toml");
  CHECK(c.ps.apply_threads == 4);
  CHECK(c.ps.apply_split_bytes == 4096);
  CHECK(parse_config(to_toml(c), "rt.toml").ps == c.ps);
  RunConfig o = parse_config("", "o.toml");
  apply_override(o, "ps.apply_threads=2");
  CHECK(o.ps.apply_threads == 2);
}

TEST_CASE("ps.apply_threads, ps.apply_split_bytes: out of range, refused naming the key") {
  CHECK(error_of("[ps]\napply_threads = -1") ==
        "bad.toml:2: key 'ps.apply_threads': expected an integer in [0, 1024], got -1");
  CHECK(error_of("[ps]\napply_threads = 2000") ==
        "bad.toml:2: key 'ps.apply_threads': expected an integer in [0, 1024], got 2000");
  CHECK(error_of("[ps]\napply_split_bytes = 6") ==
        "bad.toml:2: key 'ps.apply_split_bytes': expected an integer >= 4 and a multiple of 4, got 6");
  CHECK(error_of("[ps]\napply_split_bytes = 0") ==
        "bad.toml:2: key 'ps.apply_split_bytes': expected an integer >= 4 and a multiple of 4, got 0");
}
